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

func (k KeySealer) aead() (cipher.AEAD, error) {
	key, err := k.Key()
	if err != nil {
		return nil, err
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%s is %d bytes, want 32", k.What, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (k KeySealer) Seal(seed []byte) error {
	a, err := k.aead()
	if err != nil {
		return fmt.Errorf("sealing the seed: %w", err)
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	out := append([]byte(sealedMagic), nonce...)
	out = a.Seal(out, nonce, seed, []byte(sealedMagic))
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
	a, err := k.aead()
	if err != nil {
		return nil, fmt.Errorf("unsealing the seed: %w", err)
	}
	body, ok := bytes.CutPrefix(raw, []byte(sealedMagic))
	if !ok || len(body) < a.NonceSize()+a.Overhead() {
		return nil, fmt.Errorf("%s is not a sealed seed", k.Path)
	}
	seed, err := a.Open(nil, body[:a.NonceSize()], body[a.NonceSize():], []byte(sealedMagic))
	if err != nil {
		return nil, fmt.Errorf("the seed sealed in %s does not open with this VM's %s (another chip, image or policy sealed it): the owners' shares recover CAS", k.Path, k.What)
	}
	return seed, nil
}

// Insecure is false: the file is ciphertext under a key only the TEE has.
func (KeySealer) Insecure() bool { return false }
