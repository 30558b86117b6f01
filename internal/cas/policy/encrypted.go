package policy

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// The HPKE suite (RFC 9180) policies are sealed with: DHKEM(X25519,
// HKDF-SHA256), HKDF-SHA256, AES-256-GCM, base mode, with an info string
// that binds the ciphertext to this use.
var (
	kem      = hpke.DHKEM(ecdh.X25519())
	kdf      = hpke.HKDFSHA256()
	aead     = hpke.AES256GCM()
	hpkeInfo = []byte("cloister.dev/encrypted-policy/v1")
)

// Encrypted is a signed policy sealed to one CAS, as in the
// EncryptedPolicy resource and POST /v1/policies: only that CAS can read
// it, and it is authorized by the owners' signatures inside.
type Encrypted struct {
	// Policy is base64 of HPKE's encapsulated key and ciphertext of the
	// Signed JSON.
	Policy string `json:"policy"`
	// EncryptionKey is the CAS key it is sealed to (base64 of the X25519
	// public key), so a CAS can say "not for me" before trying.
	EncryptionKey string `json:"encryptionKey"`
}

// NewEncryptionKey derives the CAS's encryption key from seed material,
// so it survives restarts and recovery unchanged.
func NewEncryptionKey(ikm []byte) (hpke.PrivateKey, error) { return kem.DeriveKeyPair(ikm) }

// EncodePublicKey is the form of a CAS encryption key in resources, flags
// and GET /v1/public-key.
func EncodePublicKey(k hpke.PublicKey) string { return base64.StdEncoding.EncodeToString(k.Bytes()) }

// DecodePublicKey reads EncodePublicKey's form.
func DecodePublicKey(s string) (hpke.PublicKey, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("encryption key: not base64: %w", err)
	}
	k, err := kem.NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("encryption key: not an X25519 public key: %w", err)
	}
	return k, nil
}

// KeyID is a short name of an encryption key for error messages.
func KeyID(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:6])
}

// Encrypt seals a signed policy to a CAS's key.
func Encrypt(s *Signed, casKey hpke.PublicKey) (*Encrypted, error) {
	plain, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	sealed, err := hpke.Seal(casKey, kdf, aead, hpkeInfo, plain)
	if err != nil {
		return nil, fmt.Errorf("sealing the policy: %w", err)
	}
	return &Encrypted{Policy: base64.StdEncoding.EncodeToString(sealed), EncryptionKey: EncodePublicKey(casKey)}, nil
}

// Decrypt opens a policy sealed to key; one sealed to another key fails
// saying which, and how to fix it.
func Decrypt(e *Encrypted, key hpke.PrivateKey) (*Signed, error) {
	mine := EncodePublicKey(key.PublicKey())
	if e.EncryptionKey != mine {
		return nil, fmt.Errorf("encryptionKey: the policy is sealed to key %s, this CAS's key is %s: encrypt it again with this CAS's key (cloister policy encrypt --cas URL)", KeyID(e.EncryptionKey), KeyID(mine))
	}
	sealed, err := base64.StdEncoding.DecodeString(e.Policy)
	if err != nil {
		return nil, fmt.Errorf("policy: not base64: %w", err)
	}
	plain, err := hpke.Open(key, kdf, aead, hpkeInfo, sealed)
	if err != nil {
		return nil, fmt.Errorf("policy: does not decrypt with this CAS's key (tampered, or sealed to another key): %w", err)
	}
	var s Signed
	if err := json.Unmarshal(plain, &s); err != nil {
		return nil, fmt.Errorf("policy: the decrypted content is not a signed policy: %w", err)
	}
	return &s, nil
}
