package collateral

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// copyReal copies files of a folder of real evidence into dir.
func copyReal(t *testing.T, folder, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), attesttest.ReadReal(t, folder, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// eventually polls cond until it holds or a generous deadline passes: the
// watcher reads the folder on its own goroutine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// A collateral folder is read once, not at each attestation; watched, it
// is read again after a change; and a change to older Intel collateral
// (Intel-signed, still valid) is refused and named, the newer contents
// served on.
func TestFolder(t *testing.T) {
	dir := t.TempDir()
	all := []string{"tcb_info.json", "qe_identity.json", "tcb_signing_certs.pem", "pck_crl.der", "root_ca_crl.der"}
	copyReal(t, "tdx/dcap-qvl-v5", dir, all...)
	newer, err := os.ReadFile(filepath.Join(dir, "qe_identity.json"))
	if err != nil {
		t.Fatal(err)
	}

	// Unwatched: read at the first question only.
	once := &Folder{Dir: dir}
	if c, err := once.Contents(); err != nil || !bytes.Equal(c.Intel.QEIdentity, newer) {
		t.Fatalf("first read: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vcek.der"), []byte("a VCEK"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, _ := once.Contents(); c.VCEK != nil {
		t.Error("the folder was read again at a later question")
	}
	if err := os.Remove(filepath.Join(dir, "vcek.der")); err != nil {
		t.Fatal(err)
	}

	// Watched: a change is read.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := &Folder{Dir: dir}
	done := make(chan error, 1)
	go func() { done <- watched.Watch(ctx) }()
	eventually(t, "the folder read", func() bool { c, err := watched.Contents(); return err == nil && bytes.Equal(c.Intel.QEIdentity, newer) })
	if err := os.WriteFile(filepath.Join(dir, "vlek.pem"), []byte("a VLEK"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VLEK added read", func() bool { c, _ := watched.Contents(); return string(c.VLEK) == "a VLEK" })

	// An older QE identity: refused, named, the newer served on.
	copyReal(t, "tdx/dcap-qvl-v4", dir, "qe_identity.json")
	eventually(t, "the older QE identity refused", func() bool {
		err := watched.Err()
		return err != nil && strings.Contains(err.Error(), "the TD_QE identity has tcbEvaluationDataNumber 17, older than the 18 already accepted")
	})
	if c, err := watched.Contents(); err != nil || !bytes.Equal(c.Intel.QEIdentity, newer) {
		t.Errorf("after the refusal: %v, want the newer identity served", err)
	}
	// Put back, it is taken again.
	if err := os.WriteFile(filepath.Join(dir, "qe_identity.json"), newer, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the newer identity taken again", func() bool { return watched.Err() == nil })
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
