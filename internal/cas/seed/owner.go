package seed

import (
	"crypto/ecdsa"
	"crypto/hpke"
	"encoding/json"
	"fmt"
)

// Shares go to their owners sealed with HPKE (DHKEM(P-256, HKDF-SHA256),
// HKDF-SHA256, AES-256-GCM) to the owner's P-256 key, the same kind of key
// policy owners use (cloister policy keygen): CAS never stores them, and
// only the owner can read theirs.
var shareInfo = []byte("cloister.dev/cas/seed-share/v1")

// SealShare seals a share to its owner's public key.
func SealShare(sh Share, owner *ecdsa.PublicKey) ([]byte, error) {
	pub, err := owner.ECDH()
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	hk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	plain, err := json.Marshal(sh)
	if err != nil {
		return nil, err
	}
	return hpke.Seal(hk, hpke.HKDFSHA256(), hpke.AES256GCM(), shareInfo, plain)
}

// OpenShare opens a sealed share with its owner's private key.
func OpenShare(sealed []byte, owner *ecdsa.PrivateKey) (Share, error) {
	priv, err := owner.ECDH()
	if err != nil {
		return Share{}, fmt.Errorf("owner key: %w", err)
	}
	hk, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return Share{}, fmt.Errorf("owner key: %w", err)
	}
	plain, err := hpke.Open(hk, hpke.HKDFSHA256(), hpke.AES256GCM(), shareInfo, sealed)
	if err != nil {
		return Share{}, fmt.Errorf("the share does not open with this key (another owner's share?): %w", err)
	}
	var sh Share
	if err := json.Unmarshal(plain, &sh); err != nil {
		return Share{}, fmt.Errorf("sealed share: %w", err)
	}
	return sh, nil
}
