package core

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// With a key sealer a restart in the same VM unseals by itself; the file
// is ciphertext, and a VM whose key differs (another chip, image or
// policy) leaves CAS in recovery, saying why, its state untouched.
func TestKeySealer(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	path := filepath.Join(t.TempDir(), "sealed-seed")
	sealer := seal.KeySealer{Path: path, Key: func() ([]byte, error) { return key, nil }, What: "test key"}
	f := newFixture(t, sealer, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(raw), seal.Magic) {
		t.Fatalf("sealed file: %v", err)
	}
	seed, err := sealer.Unseal()
	if err != nil || bytes.Contains(raw, seed) {
		t.Fatalf("the sealed file holds the seed in the clear, or does not open: %v", err)
	}
	f.open(sealer)
	if st, why := f.cas.Status(); st != wire.Ready {
		t.Fatalf("after restart with the same key: %s %q", st, why)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); err != nil {
		t.Error(err)
	}
	other := sealer
	other.Key = func() ([]byte, error) { return bytes.Repeat([]byte{8}, 32), nil }
	f.open(other)
	if st, why := f.cas.Status(); st != wire.RecoveryMode {
		t.Fatalf("after restart with another key: %s %q", st, why)
	}
	if _, err := other.Unseal(); err == nil || !strings.Contains(err.Error(), "does not open with this VM's test key") {
		t.Errorf("unsealing with another key: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, raw) {
		t.Error("a failed unseal changed the sealed file")
	}
	short := sealer
	short.Key = func() ([]byte, error) { return key[:16], nil }
	if err := short.Seal([]byte("seed")); err == nil || !strings.Contains(err.Error(), "16 bytes, want 32") {
		t.Errorf("a 16-byte key: %v", err)
	}
	if _, err := (seal.KeySealer{Path: filepath.Join(t.TempDir(), "none")}).Unseal(); !errors.Is(err, seal.ErrNotSealed) {
		t.Errorf("no file: %v", err)
	}
}
