package seal

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A wrapped seed opens under its key alone, and names where it was found
// when another key cannot open it.
func TestWrapUnwrap(t *testing.T) {
	key := func(b byte) func() ([]byte, error) {
		return func() ([]byte, error) { return bytes.Repeat([]byte{b}, 32), nil }
	}
	seed := []byte("a root seed of thirty-two bytes!")
	blob, err := Wrap(key(1), "test key", seed)
	if err != nil || !bytes.HasPrefix(blob, []byte(Magic)) || bytes.Contains(blob, seed) {
		t.Fatalf("Wrap: %q, %v", blob, err)
	}
	if got, err := Unwrap(key(1), "test key", "the slot", blob); err != nil || !bytes.Equal(got, seed) {
		t.Errorf("Unwrap: %q, %v", got, err)
	}
	if _, err := Unwrap(key(2), "test key", "the slot", blob); err == nil || !strings.Contains(err.Error(), "the slot does not open") && !strings.Contains(err.Error(), "sealed in the slot") {
		t.Errorf("another key: %v", err)
	}
	if _, err := Unwrap(key(1), "test key", "the slot", []byte("plain")); err == nil || !strings.Contains(err.Error(), "is not a sealed seed") {
		t.Errorf("not sealed: %v", err)
	}
}

// A file sealer is the seed in the clear, says so, and holds nothing
// before the first seal.
func TestFileSealer(t *testing.T) {
	f := FileSealer{Path: filepath.Join(t.TempDir(), "state", "seed")}
	if _, err := f.Unseal(); !errors.Is(err, ErrNotSealed) {
		t.Errorf("before sealing: %v", err)
	}
	if err := f.Seal([]byte("seed")); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Unseal(); err != nil || string(got) != "seed" || !f.Insecure() {
		t.Errorf("after sealing: %q, %v, insecure %v", got, err, f.Insecure())
	}
	if _, err := (NoSealer{}).Unseal(); !errors.Is(err, ErrNotSealed) || (NoSealer{}).Insecure() {
		t.Errorf("NoSealer: %v", err)
	}
}
