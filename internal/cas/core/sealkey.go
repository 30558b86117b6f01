package core

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
)

// KeySealer seals the seed into a file under a key only the TEE derives
// (SEV-SNP's derived key: the chip, the launch measurement, the guest
// policy), so a restart of the same CAS in the same kind of VM on the same
// chip unseals it without the owners, and anyone else who reads the file
// (the node's root, a copy of the volume) holds only ciphertext. A file it
// cannot open (another chip, image or policy) leaves CAS in recovery.
type KeySealer struct {
	Path string
	// Key derives the sealing key (32 bytes), afresh at each use.
	Key func() ([]byte, error)
	// What names the key in errors, e.g. "the SEV-SNP derived key".
	What string
}

// sealedMagic starts a sealed file: its format's version.
const sealedMagic = "cloister-sealed-seed-v1\n"

func (k KeySealer) Seal(seed []byte) error {
	out, err := wrapSeed(k.Key, k.What, seed)
	if err != nil {
		return fmt.Errorf("sealing the seed: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(k.Path), 0o700); err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(k.Path, out, 0o600)
	return err
}

func (k KeySealer) Unseal() ([]byte, error) {
	raw, err := os.ReadFile(k.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotSealed
	}
	if err != nil {
		return nil, err
	}
	return unwrapSeed(k.Key, k.What, k.Path, raw)
}

// Insecure is false: the file is ciphertext under a key only the TEE has.
func (KeySealer) Insecure() bool { return false }

func sealingAEAD(key func() ([]byte, error), what string) (cipher.AEAD, error) {
	k, err := key()
	if err != nil {
		return nil, err
	}
	if len(k) != 32 {
		return nil, fmt.Errorf("%s is %d bytes, want 32", what, len(k))
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// wrapSeed seals seed under key: the format's version, a nonce, and the
// ciphertext.
func wrapSeed(key func() ([]byte, error), what string, seed []byte) ([]byte, error) {
	a, err := sealingAEAD(key, what)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte(sealedMagic), nonce...)
	return a.Seal(out, nonce, seed, []byte(sealedMagic)), nil
}

// unwrapSeed opens what wrapSeed sealed; where names it in errors.
func unwrapSeed(key func() ([]byte, error), what, where string, raw []byte) ([]byte, error) {
	a, err := sealingAEAD(key, what)
	if err != nil {
		return nil, fmt.Errorf("unsealing the seed: %w", err)
	}
	body, ok := bytes.CutPrefix(raw, []byte(sealedMagic))
	if !ok || len(body) < a.NonceSize()+a.Overhead() {
		return nil, fmt.Errorf("%s is not a sealed seed", where)
	}
	seed, err := a.Open(nil, body[:a.NonceSize()], body[a.NonceSize():], []byte(sealedMagic))
	if err != nil {
		return nil, fmt.Errorf("the seed sealed in %s does not open with this VM's %s (another chip, image or policy sealed it): the owners' shares recover CAS", where, what)
	}
	return seed, nil
}
