package produce

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-configfs-tsm/configfs/configfsi"
	"github.com/google/go-configfs-tsm/report"
	"github.com/google/go-sev-guest/abi"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

// The providers configfs-tsm names (an entry's provider attribute).
const (
	providerSEV = "sev_guest"
	providerTDX = "tdx_guest"
)

// TSM makes SEV-SNP or TDX evidence through configfs-tsm: one report
// entry per request (made, written, read, removed), so concurrent callers
// never share one.
type TSM struct {
	// Root is configfs-tsm's folder (DefaultTSM).
	Root string
	// Provider is what the kernel names the TEE: sev_guest or tdx_guest.
	Provider string
}

// OpenTSM checks that root holds a report folder and asks it which TEE
// answers.
func OpenTSM(ctx context.Context, root string) (*TSM, error) {
	if fi, err := os.Stat(filepath.Join(root, "report")); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a folder")
		}
		return nil, fmt.Errorf("configfs-tsm %s/report: %w", root, err)
	}
	c := &rooted{root: root, ctx: ctx}
	r, err := report.Create(c, &report.Request{})
	if err != nil {
		return nil, fmt.Errorf("configfs-tsm %s: %w", root, err)
	}
	provider, err := r.ReadOption("provider")
	err = errors.Join(err, r.Destroy())
	if err != nil {
		return nil, fmt.Errorf("configfs-tsm %s: %w", root, err)
	}
	t := &TSM{Root: root, Provider: strings.TrimSpace(string(provider))}
	if t.Type() == "" {
		return nil, fmt.Errorf("configfs-tsm %s: provider %q is neither %s nor %s", root, t.Provider, providerSEV, providerTDX)
	}
	return t, nil
}

// Type implements Producer.
func (t *TSM) Type() attest.Type {
	switch t.Provider {
	case providerSEV:
		return attest.SNP
	case providerTDX:
		return attest.TDX
	}
	return ""
}

// maxTries bounds retries of a report whose entry changed under it (the
// library's generation check): another writer, which a fresh entry of
// our own makes unlikely.
const maxTries = 3

// Quote implements Producer: a SEV-SNP report followed by the platform's
// certificate table (the auxblob, as go-sev-guest's quote providers
// return it), or a TDX quote.
func (t *TSM) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	rd, err := pad(reportData)
	if err != nil {
		return attest.Evidence{}, err
	}
	typ := t.Type()
	if typ == "" {
		return attest.Evidence{}, fmt.Errorf("configfs-tsm provider %q is neither %s nor %s", t.Provider, providerSEV, providerTDX)
	}
	req := &report.Request{InBlob: rd[:], GetAuxBlob: typ == attest.SNP}
	var resp *report.Response
	for try := 1; ; try++ {
		resp, err = report.Get(&rooted{root: t.Root, ctx: ctx}, req)
		if err == nil || report.GetGenerationErr(err) == nil || try == maxTries {
			break
		}
	}
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("configfs-tsm report: %w", err)
	}
	if p := strings.TrimSpace(resp.Provider); p != t.Provider {
		return attest.Evidence{}, fmt.Errorf("configfs-tsm answered as %q, opened as %q", p, t.Provider)
	}
	if typ == attest.TDX {
		quote, got, err := tdx.ReportData(resp.OutBlob)
		if err != nil {
			return attest.Evidence{}, fmt.Errorf("configfs-tsm outblob: %w", err)
		}
		if err := checkBound(typ, got, rd[:]); err != nil {
			return attest.Evidence{}, err
		}
		return attest.Evidence{Type: typ, Raw: quote}, nil
	}
	raw, err := snpEvidence(resp.OutBlob, resp.AuxBlob, rd)
	return attest.Evidence{Type: typ, Raw: raw}, err
}

// snpEvidence checks a report's report data and appends the platform's
// certificate table.
func snpEvidence(reportRaw, certs []byte, rd [ReportDataSize]byte) ([]byte, error) {
	if len(reportRaw) < abi.ReportSize {
		return nil, fmt.Errorf("the SEV-SNP report is %d bytes, want %d", len(reportRaw), abi.ReportSize)
	}
	rep, err := abi.ReportToProto(reportRaw[:abi.ReportSize])
	if err != nil {
		return nil, fmt.Errorf("the SEV-SNP report: %w", err)
	}
	if err := checkBound(attest.SNP, rep.GetReportData(), rd[:]); err != nil {
		return nil, err
	}
	if len(certs) > 0 {
		var t abi.CertTable
		if err := t.Unmarshal(certs); err != nil {
			return nil, fmt.Errorf("the platform's certificate table: %w", err)
		}
	}
	out := make([]byte, 0, abi.ReportSize+len(certs))
	return append(append(out, reportRaw[:abi.ReportSize]...), certs...), nil
}

// rooted is configfs-tsm's client at a root of the caller's choice (the
// library's own Linux client is fixed at DefaultTSM).
//
// On configfs, an entry's attributes exist as soon as the entry does and
// reading outblob blocks until the TEE answers. A folder that a
// user-space provider serves instead (the fake confidential VM of
// Cloister's tests) writes them a moment later, so an attribute not there
// yet is waited for, until the context ends; on configfs the wait never
// happens.
type rooted struct {
	root string
	ctx  context.Context
}

var _ configfsi.Client = (*rooted)(nil)

func (c *rooted) local(name string) (string, error) {
	rest, ok := strings.CutPrefix(filepath.Clean(name), configfsi.TsmPrefix)
	if !ok {
		return "", fmt.Errorf("%q is not under %s", name, configfsi.TsmPrefix)
	}
	return filepath.Join(c.root, rest), nil
}

func (c *rooted) MkdirTemp(dir, pattern string) (string, error) {
	local, err := c.local(dir)
	if err != nil {
		return "", err
	}
	made, err := os.MkdirTemp(local, pattern)
	if err != nil {
		return "", err
	}
	return filepath.Join(configfsi.TsmPrefix, strings.TrimPrefix(made, filepath.Clean(c.root))), nil
}

func (c *rooted) ReadFile(name string) ([]byte, error) {
	local, err := c.local(name)
	if err != nil {
		return nil, err
	}
	wait := time.Millisecond
	for {
		b, err := os.ReadFile(local)
		if !errors.Is(err, fs.ErrNotExist) {
			return b, err
		}
		select {
		case <-c.ctx.Done():
			return nil, fmt.Errorf("%s: %w (%w)", local, err, c.ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func (c *rooted) WriteFile(name string, contents []byte) error {
	local, err := c.local(name)
	if err != nil {
		return err
	}
	// configfs ignores the mode; a served folder's provider reads as root.
	return os.WriteFile(local, contents, 0o600)
}

func (c *rooted) RemoveAll(name string) error {
	local, err := c.local(name)
	if err != nil {
		return err
	}
	// configfs removes an entry with its attributes by rmdir, which
	// RemoveAll tries first; a served folder's entry needs its files gone.
	return os.RemoveAll(local)
}
