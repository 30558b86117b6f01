package producetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce"
)

// TSMFolder answers a configfs-tsm-shaped folder as the kernel would: for
// every report entry made under Root/report it writes the provider and
// generation attributes, and for the entry's inblob its outblob (and
// auxblob) with the generation advanced, so the real producer code runs
// unchanged against a plain folder, in a process or in a pod that mounts
// it.
type TSMFolder struct {
	Root string
	// Provider is sev_guest or tdx_guest.
	Provider string
	// Answer makes an inblob's outblob and auxblob (nil: none).
	Answer func(inblob []byte) (outblob, auxblob []byte, err error)
	// Errors receives Answer's errors (nil: dropped).
	Errors func(error)
}

// pollInterval is how often the folder is looked at.
const pollInterval = 2 * time.Millisecond

// Serve answers until ctx ends. It makes Root/report, writable by every
// user.
func (f *TSMFolder) Serve(ctx context.Context) error {
	reports := filepath.Join(f.Root, "report")
	if err := os.MkdirAll(reports, 0o750); err != nil {
		return err
	}
	// Any user of the fake VM (a pod's non-root initializer, through a
	// mount of Root) reaches the folder and makes its entries there, as on
	// configfs.
	if err := os.Chmod(f.Root, 0o755); err != nil { //nolint:gosec // a folder of public reports
		return err
	}
	if err := os.Chmod(reports, 0o777); err != nil { //nolint:gosec // as above
		return err
	}
	answered := map[string]*entry{}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		entries, err := os.ReadDir(reports)
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			live[e.Name()] = true
			if err := f.serveEntry(filepath.Join(reports, e.Name()), answered); err != nil && f.Errors != nil {
				f.Errors(fmt.Errorf("%s: %w", e.Name(), err))
			}
		}
		for name := range answered {
			if !live[name] {
				delete(answered, name)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// entry is what was answered in one report entry.
type entry struct {
	inblob     []byte
	generation int
}

func (f *TSMFolder) serveEntry(dir string, answered map[string]*entry) error {
	name := filepath.Base(dir)
	e := answered[name]
	if e == nil {
		if err := writeAttr(dir, "provider", []byte(f.Provider+"\n")); err != nil {
			return err
		}
		if err := writeAttr(dir, "generation", []byte("0\n")); err != nil {
			return err
		}
		e = &entry{}
		answered[name] = e
	}
	in, err := os.ReadFile(filepath.Join(dir, "inblob"))
	if errors.Is(err, os.ErrNotExist) || (err == nil && (len(in) == 0 || bytes.Equal(in, e.inblob))) {
		return nil
	}
	if err != nil {
		return err
	}
	e.inblob = in
	e.generation++ // each write of an attribute advances it, as on configfs
	out, aux, err := f.Answer(in)
	if err != nil {
		return err
	}
	// The generation first, then the blobs: a reader that sees the blob
	// sees the generation of the write that made it.
	if err := writeAttr(dir, "generation", fmt.Appendf(nil, "%d\n", e.generation)); err != nil {
		return err
	}
	if aux != nil || f.Provider == ProviderSEV {
		if err := writeAttr(dir, "auxblob", aux); err != nil {
			return err
		}
	}
	return writeAttr(dir, "outblob", out)
}

// writeAttr replaces an attribute at once (a temporary file renamed), so
// a reader never sees half of it.
func writeAttr(dir, attr string, data []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-"+attr)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // the entry is gone: its reader stopped waiting
		}
		return err
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, attr))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return err
}

// SNPAnswer answers as a SEV-SNP guest: a report signed by s over the
// inblob, and the platform's certificate table. tamper, when set, changes
// the signed report (a test of what a verifier refuses).
func SNPAnswer(s *SNPSigner, tamper func(report []byte)) func([]byte) ([]byte, []byte, error) {
	return func(in []byte) ([]byte, []byte, error) {
		report, err := s.Report(in)
		if err != nil {
			return nil, nil, err
		}
		if tamper != nil {
			tamper(report)
		}
		table, err := s.CertTable()
		return report, table, err
	}
}

// QuoteAnswer answers every inblob with the same quote: a TDX guest whose
// quoting service replies with a canned quote, for tests of a producer
// that must refuse a quote over other report data.
func QuoteAnswer(quote []byte) func([]byte) ([]byte, []byte, error) {
	return func([]byte) ([]byte, []byte, error) { return bytes.Clone(quote), nil, nil }
}

// Providers the kernel names.
const (
	ProviderSEV = "sev_guest"
	ProviderTDX = "tdx_guest"
)

// ServeForTest serves f until the test ends, and returns once the report
// folder exists.
func ServeForTest(tb testing.TB, f *TSMFolder) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(filepath.Join(f.Root, "report")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s/report was not made", f.Root)
		}
	}
}

// GuestPaths points a producer at configfs-tsm folder tsm alone: the
// guest devices and the NSM at paths that do not exist.
func GuestPaths(tsm string) produce.Paths {
	none := filepath.Join(tsm, "none")
	return produce.Paths{TSM: tsm, SEVGuest: none, TDXGuest: none, NSM: none}
}

// ServeVM serves at root, until the test ends, the configfs-tsm folder of
// an SEV-SNP guest s signs for, launched with hostData (nil keeps s's);
// tamper, when set, changes each signed report. It returns root.
func (s *SNPSigner) ServeVM(tb testing.TB, root string, hostData []byte, tamper func(report []byte)) string {
	tb.Helper()
	guest := *s
	if hostData != nil {
		copy(guest.HostData[:], hostData)
	}
	ServeForTest(tb, &TSMFolder{Root: root, Provider: ProviderSEV, Answer: SNPAnswer(&guest, tamper), Errors: func(err error) { tb.Log(err) }})
	return root
}
