package policy

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
)

// signContext separates policy signatures from any other use of an owner
// key: a signature made here verifies nowhere else, and vice versa.
const signContext = "cloister.dev/policy-signature/v1\n"

// Signed is a policy with its owners' detached signatures, as in the
// SignedPolicy resource and POST /v1/policies.
type Signed struct {
	// Policy is the document as its author wrote it (YAML or JSON).
	Policy     string      `json:"policy"`
	Signatures []Signature `json:"signatures"`
}

// Signature is one owner's signature over the canonical bytes.
type Signature struct {
	// Signer is the owner key's fingerprint ("sha256:<hex of its DER>").
	Signer string `json:"signer"`
	// Signature is ASN.1 ECDSA over SHA-256, base64.
	Signature string `json:"signature"`
}

// Fingerprint names a public key: SHA-256 of its PKIX DER.
func Fingerprint(k *ecdsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		panic("policy: marshalling an ECDSA key: " + err.Error())
	}
	h := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(h[:])
}

func digestToSign(d *Document) []byte {
	h := sha256.Sum256(append([]byte(signContext), d.Canonical()...))
	return h[:]
}

// Sign adds key's signature to s (whose policy must parse); a second
// signature by the same key replaces the first.
func Sign(s *Signed, key *ecdsa.PrivateKey) error {
	d, err := Parse([]byte(s.Policy))
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	sig, err := ecdsa.SignASN1(rand.Reader, key, digestToSign(d))
	if err != nil {
		return err
	}
	fp := Fingerprint(&key.PublicKey)
	entry := Signature{Signer: fp, Signature: base64.StdEncoding.EncodeToString(sig)}
	for i := range s.Signatures {
		if s.Signatures[i].Signer == fp {
			s.Signatures[i] = entry
			return nil
		}
	}
	s.Signatures = append(s.Signatures, entry)
	return nil
}

// Signers returns the fingerprints of the keys among keys whose signature
// on d verifies; signatures by other keys are ignored, a malformed or
// failing one by a listed key is an error naming it.
func Signers(d *Document, sigs []Signature, keys []*ecdsa.PublicKey) (map[string]bool, error) {
	byFP := map[string]*ecdsa.PublicKey{}
	for _, k := range keys {
		byFP[Fingerprint(k)] = k
	}
	digest := digestToSign(d)
	ok := map[string]bool{}
	for i, s := range sigs {
		k := byFP[s.Signer]
		if k == nil {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(s.Signature)
		if err != nil || !ecdsa.VerifyASN1(k, digest, raw) {
			return nil, fmt.Errorf("signatures[%d]: the signature of %s does not verify over this policy: sign it again (cloister policy sign)", i, s.Signer)
		}
		ok[s.Signer] = true
	}
	return ok, nil
}

// NewKey makes an owner key.
func NewKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(ecdsaCurve, rand.Reader) }

// MarshalKey and ParseKey store an owner's private key (PEM "PRIVATE
// KEY", PKCS #8).
func MarshalKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey reads an owner's private key (unencrypted PKCS #8 PEM).
func ParseKey(data []byte) (*ecdsa.PrivateKey, error) { return keyfile.ParsePrivate(data) }

// CreateKeyFile makes an owner key and writes it to path (0600); an
// existing file is never overwritten.
func CreateKeyFile(path string) (*ecdsa.PrivateKey, error) {
	k, err := NewKey()
	if err != nil {
		return nil, err
	}
	pemKey, err := MarshalKey(k)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(pemKey); err != nil {
		_ = f.Close()
		return nil, err
	}
	return k, f.Close()
}

// ReadKeyFile reads an owner key CreateKeyFile wrote.
func ReadKeyFile(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// MarshalPublicKey is the PEM form owners put into policies.
func MarshalPublicKey(k *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		panic("policy: marshalling an ECDSA key: " + err.Error())
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}
