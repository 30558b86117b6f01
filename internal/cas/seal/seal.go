// Package seal owns where a CAS keeps its root seed so that a restart
// unseals it without the recovery owners: under a key only its TEE
// derives (a file, or its node's slot of the shared state), in a plain
// file in development, or nowhere.
package seal

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

// Sealer keeps the seed where a restarted CAS can unseal it without its
// owners: a TEE's sealing key in production, a file in development.
type Sealer interface {
	Seal(seed []byte) error
	// Unseal returns the sealed seed, or ErrNotSealed.
	Unseal() ([]byte, error)
	// Insecure says the seal protects nothing (a plain file).
	Insecure() bool
}

// ErrNotSealed: the sealer holds no seed; recovery needs the owners.
var ErrNotSealed = errors.New("no sealed seed")

// FileSealer keeps the seed in a file: development only, since whoever
// reads the file has every secret of this CAS.
type FileSealer struct{ Path string }

// Seal writes the seed into the file (0600), whole or not at all.
func (f FileSealer) Seal(b []byte) error {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return err
	}
	tmp := f.Path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.Path)
}

// Unseal reads the seed from the file.
func (f FileSealer) Unseal() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotSealed
	}
	return b, err
}

// Insecure is true: the file is the seed in the clear.
func (FileSealer) Insecure() bool { return true }

// NoSealer keeps nothing: every restart needs the owners' shares.
type NoSealer struct{}

func (NoSealer) Seal([]byte) error       { return nil }
func (NoSealer) Unseal() ([]byte, error) { return nil, ErrNotSealed }
func (NoSealer) Insecure() bool          { return false }

// SlotSealer seals the seed into CAS's state itself, in the slot of this
// replica's node: under a key this node's TEE derives (SEV-SNP's derived
// key: this chip, image and policy) or, in simulation, a key derived from
// CAS's simulation key and the node's name, which is insecure (whoever
// reads that key unseals every slot). A state the replicas share carries
// each node's sealed seed, so a replica started again on a node, even
// after every replica was gone, unseals its slot without peers or owners.
type SlotSealer struct {
	// Node names the slot.
	Node string
	// Key derives the sealing key (32 bytes), afresh at each use.
	Key func() ([]byte, error)
	// What names the key in errors and logs.
	What string
	// Simulated: the key protects nothing (simulation).
	Simulated bool
}

// Seal and Unseal do nothing: CAS keeps a SlotSealer's seed in its state.
func (SlotSealer) Seal([]byte) error       { return nil }
func (SlotSealer) Unseal() ([]byte, error) { return nil, ErrNotSealed }
func (s SlotSealer) Insecure() bool        { return s.Simulated }

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

// Magic starts a sealed file: its format's version.
const Magic = "cloister-sealed-seed-v1\n"

func (k KeySealer) Seal(seed []byte) error {
	out, err := Wrap(k.Key, k.What, seed)
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
	return Unwrap(k.Key, k.What, k.Path, raw)
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

// Wrap seals seed under key: the format's version, a nonce, and the
// ciphertext.
func Wrap(key func() ([]byte, error), what string, seed []byte) ([]byte, error) {
	a, err := sealingAEAD(key, what)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte(Magic), nonce...)
	return a.Seal(out, nonce, seed, []byte(Magic)), nil
}

// Unwrap opens what Wrap sealed; where names it in errors.
func Unwrap(key func() ([]byte, error), what, where string, raw []byte) ([]byte, error) {
	a, err := sealingAEAD(key, what)
	if err != nil {
		return nil, fmt.Errorf("unsealing the seed: %w", err)
	}
	body, ok := bytes.CutPrefix(raw, []byte(Magic))
	if !ok || len(body) < a.NonceSize()+a.Overhead() {
		return nil, fmt.Errorf("%s is not a sealed seed", where)
	}
	seed, err := a.Open(nil, body[:a.NonceSize()], body[a.NonceSize():], []byte(Magic))
	if err != nil {
		return nil, fmt.Errorf("the seed sealed in %s does not open with this VM's %s (another chip, image or policy sealed it): the owners' shares recover CAS", where, what)
	}
	return seed, nil
}
