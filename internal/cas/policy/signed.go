package policy

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
)

// signContext separates policy signatures from any other use of an owner
// key: a signature made here verifies nowhere else, and vice versa. v1
// signed the document alone, so any version could be submitted again at
// any time; v2 signs its place in the policy's chain too.
const (
	signContext       = "cloister.dev/policy-signature/v2\n"
	legacySignContext = "cloister.dev/policy-signature/v1\n"
)

// Signed is a policy with its owners' detached signatures, as in the
// SignedPolicy resource and POST /v1/policies. The owners sign the
// document together with its Link, so a signature approves this document
// as this version after that one, and nothing else: an old version comes
// back only if the current owners sign it again as the next version.
type Signed struct {
	// Policy is the document as its author wrote it (YAML or JSON).
	Policy string `json:"policy"`
	Link
	Signatures []Signature `json:"signatures"`
}

// Link is a version's place in its policy's chain.
type Link struct {
	// Version is 1 for a new policy and one more than CAS's current
	// version for a change.
	Version int `json:"version"`
	// Predecessor is the digest of the version this one replaces; empty
	// for version 1.
	Predecessor string `json:"predecessor,omitempty"`
}

// Validate checks the link's form.
func (l Link) Validate() error {
	switch {
	case l.Version < 1:
		return fmt.Errorf("version: %d: sign the policy as version 1 if it is new, or as one more than CAS's current version (cloister policy sign --cas URL asks CAS)", l.Version)
	case l.Version == 1 && l.Predecessor != "":
		return errors.New("predecessor: version 1 replaces nothing; leave it empty")
	case l.Version > 1 && !digestRE.MatchString(l.Predecessor):
		return fmt.Errorf("predecessor: %q: version %d needs the digest (64 hex digits) of version %d", l.Predecessor, l.Version, l.Version-1)
	}
	return nil
}

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Signature is one owner's signature over the document and its link.
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

// statement is what an owner signs: the name and the link are in it
// besides the document's digest, so neither can be moved to another
// policy or place in the chain.
type statement struct {
	Name        string `json:"name"`
	Version     int    `json:"version"`
	Predecessor string `json:"predecessor"`
	Digest      string `json:"digest"`
}

func digestToSign(d *Document, l Link) []byte {
	b, err := json.Marshal(statement{Name: d.Name, Version: l.Version, Predecessor: l.Predecessor, Digest: d.Digest()})
	if err != nil {
		panic("policy: marshalling a statement: " + err.Error())
	}
	h := sha256.Sum256(append([]byte(signContext), b...))
	return h[:]
}

// legacyDigest is what v1 signed, only to tell its owners why it fails.
func legacyDigest(d *Document) []byte {
	h := sha256.Sum256(append([]byte(legacySignContext), d.Canonical()...))
	return h[:]
}

// Sign adds key's signature to s (whose policy must parse and whose link
// must be well formed); a second signature by the same key replaces the
// first.
func Sign(s *Signed, key *ecdsa.PrivateKey) error {
	d, err := Parse([]byte(s.Policy))
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	sig, err := ecdsa.SignASN1(rand.Reader, key, digestToSign(d, s.Link))
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
// on d at link l verifies. A signature by any other key is an error: CAS
// keeps the signatures it accepts, and a stranger's must not appear
// there as if it had approved anything. So is a malformed or failing one,
// named with the fix.
func Signers(d *Document, l Link, sigs []Signature, keys []*ecdsa.PublicKey) (map[string]bool, error) {
	byFP := map[string]*ecdsa.PublicKey{}
	for _, k := range keys {
		byFP[Fingerprint(k)] = k
	}
	digest := digestToSign(d, l)
	ok := map[string]bool{}
	for i, s := range sigs {
		k := byFP[s.Signer]
		if k == nil {
			return nil, fmt.Errorf("signatures[%d]: %s is not among the keys that may approve version %d: remove its signature", i, s.Signer, l.Version)
		}
		if ok[s.Signer] {
			return nil, fmt.Errorf("signatures[%d]: a second signature by %s", i, s.Signer)
		}
		raw, err := base64.StdEncoding.DecodeString(s.Signature)
		switch {
		case err == nil && ecdsa.VerifyASN1(k, digest, raw):
		case err == nil && ecdsa.VerifyASN1(k, legacyDigest(d), raw):
			return nil, fmt.Errorf("signatures[%d]: %s signed the document alone, the way before versioned signatures: sign it again as version %d (cloister policy sign)", i, s.Signer, l.Version)
		default:
			return nil, fmt.Errorf("signatures[%d]: the signature of %s does not verify over this policy as version %d after %q: sign it again (cloister policy sign)", i, s.Signer, l.Version, l.Predecessor)
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
	s, err := keyfile.PublicPEM(k)
	if err != nil {
		panic("policy: marshalling an ECDSA key: " + err.Error())
	}
	return []byte(s)
}
