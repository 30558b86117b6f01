package tlog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"golang.org/x/mod/sumdb/note"
)

// Origin is the log of the CAS whose trust domain is trustDomain: the
// checkpoints' first line, and the name of the key that signs them.
func Origin(trustDomain string) string { return trustDomain + "/log" }

// signer signs checkpoints with an Ed25519 key (C2SP signed-note's
// algorithm 0x01), which CAS derives from its seed.
type signer struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
}

// NewSigner is the note signer called name with key.
func NewSigner(name string, key ed25519.PrivateKey) note.Signer {
	return &signer{name: name, hash: keyHash(name, key.Public().(ed25519.PublicKey)), key: key}
}

func (s *signer) Name() string                    { return s.name }
func (s *signer) KeyHash() uint32                 { return s.hash }
func (s *signer) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.key, msg), nil }

// VerifierKey is the verifier key (note's vkey text) of name's key pub,
// which clients pin.
func VerifierKey(name string, pub ed25519.PublicKey) (string, error) {
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", fmt.Errorf("the log's key: %w", err)
	}
	return vkey, nil
}

// keyHash is signed-note's key ID: the first four bytes of SHA-256 over
// the name, a newline, the algorithm and the key.
func keyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write([]byte{0x01})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}
