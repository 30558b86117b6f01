// Package ownerseal seals a secret to one owner's P-256 key (the kind of
// key cloister policy keygen makes) with HPKE (RFC 9180: DHKEM(P-256,
// HKDF-SHA256), HKDF-SHA256, AES-256-GCM, base mode), under an info
// string that binds the ciphertext to its use: CAS's seed shares, a
// Vault's recovery keys. Only the owner's private key opens it.
package ownerseal

import (
	"crypto/ecdsa"
	"crypto/hpke"
	"fmt"
)

// Seal seals plain to owner under info.
func Seal(owner *ecdsa.PublicKey, info, plain []byte) ([]byte, error) {
	pub, err := owner.ECDH()
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	hk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	return hpke.Seal(hk, hpke.HKDFSHA256(), hpke.AES256GCM(), info, plain)
}

// Open opens what Seal sealed to owner's public half under info.
func Open(owner *ecdsa.PrivateKey, info, sealed []byte) ([]byte, error) {
	priv, err := owner.ECDH()
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	hk, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("owner key: %w", err)
	}
	return hpke.Open(hk, hpke.HKDFSHA256(), hpke.AES256GCM(), info, sealed)
}
