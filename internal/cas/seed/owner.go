package seed

import (
	"crypto/ecdsa"
	"encoding/json"
	"fmt"

	"github.com/cloister-cc/cloister/internal/base/ownerseal"
)

// Shares go to their owners sealed to the owner's P-256 key (ownerseal),
// the same kind of key policy owners use (cloister policy keygen): CAS
// never stores them, and only the owner can read theirs.
var shareInfo = []byte("cloister.dev/cas/seed-share/v1")

// SealShare seals a share to its owner's public key.
func SealShare(sh Share, owner *ecdsa.PublicKey) ([]byte, error) {
	plain, err := json.Marshal(sh)
	if err != nil {
		return nil, err
	}
	return ownerseal.Seal(owner, shareInfo, plain)
}

// OpenShare opens a sealed share with its owner's private key.
func OpenShare(sealed []byte, owner *ecdsa.PrivateKey) (Share, error) {
	plain, err := ownerseal.Open(owner, shareInfo, sealed)
	if err != nil {
		return Share{}, fmt.Errorf("the share does not open with this key (another owner's share?): %w", err)
	}
	var sh Share
	if err := json.Unmarshal(plain, &sh); err != nil {
		return Share{}, fmt.Errorf("sealed share: %w", err)
	}
	return sh, nil
}
