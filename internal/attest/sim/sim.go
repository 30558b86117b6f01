// Package sim is evidence for machines without a TEE: a document carrying
// the same Claims as hardware evidence, signed by a simulation key (LAS's
// per-node key). Nothing vouches for that key's holder, so its claims
// always say insecure, and the policy check refuses them unless the
// caller's policy allows simulation.
package sim

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Format names the document version.
const Format = "cloister.dev/sim-evidence/v1"

// envelope is the evidence on the wire: the signed payload's exact bytes,
// so no canonical JSON is needed, and the signature over them.
type envelope struct {
	Payload   []byte `json:"payload"`
	Signature []byte `json:"signature"`
}

// document is the payload.
type document struct {
	Format   string        `json:"format"`
	Key      []byte        `json:"key"` // PKIX DER of the signing key
	IssuedAt time.Time     `json:"issuedAt"`
	NotAfter time.Time     `json:"notAfter"`
	Claims   attest.Claims `json:"claims"`
}

// Generate signs claims as simulated evidence valid from issuedAt for
// validity.
func Generate(key *ecdsa.PrivateKey, claims attest.Claims, issuedAt time.Time, validity time.Duration) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	claims.Type, claims.Insecure = attest.Sim, true
	claims.NotBefore, claims.NotAfter = issuedAt.UTC(), issuedAt.Add(validity).UTC()
	payload, err := json.Marshal(document{Format: Format, Key: der, IssuedAt: claims.NotBefore, NotAfter: claims.NotAfter, Claims: claims})
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{Payload: payload, Signature: sig})
}

// Verify checks the signature and the validity at the given time and, when
// trusted is not empty, that the key is one of them (e.g. the LAS keys of
// the cluster's nodes). The claims are marked insecure whatever the
// document says.
func Verify(raw []byte, at time.Time, trusted ...*ecdsa.PublicKey) (*attest.Claims, error) {
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, attest.Reject(attest.CheckFormat, "not simulated evidence: %w", err)
	}
	if rest := bytes.TrimSpace(raw[dec.InputOffset():]); len(rest) > 0 {
		return nil, attest.Reject(attest.CheckFormat, "%d trailing bytes after the evidence", len(rest))
	}
	// Only as Generate writes it: JSON takes names in any case and base64
	// with stray bits, which would make one evidence many byte strings.
	if again, err := json.Marshal(env); err != nil || !bytes.Equal(again, bytes.TrimSpace(raw)) {
		return nil, attest.Reject(attest.CheckFormat, "simulated evidence not in the form it is written in")
	}
	var doc document
	if err := json.Unmarshal(env.Payload, &doc); err != nil {
		return nil, attest.Reject(attest.CheckFormat, "simulated evidence payload: %w", err)
	}
	if doc.Format != Format {
		return nil, attest.Reject(attest.CheckFormat, "simulated evidence format %q, want %q", doc.Format, Format)
	}
	pub, err := x509.ParsePKIXPublicKey(doc.Key)
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "simulation key: %w", err)
	}
	key, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, attest.Reject(attest.CheckFormat, "simulation key is %T, want ECDSA", pub)
	}
	digest := sha256.Sum256(env.Payload)
	if !ecdsa.VerifyASN1(key, digest[:], env.Signature) {
		return nil, attest.Reject(attest.CheckSignature, "the simulated evidence's signature does not verify with its key")
	}
	if len(trusted) > 0 && !trustedKey(key, trusted) {
		return nil, attest.Reject(attest.CheckChain, "signed by simulation key %s, which is not pinned: a forged quote, or a LAS (or developer key) this verifier was not given", fingerprint(doc.Key))
	}
	if at.Before(doc.IssuedAt) || at.After(doc.NotAfter) {
		return nil, attest.Reject(attest.CheckValidity, "valid from %s to %s, verified at %s",
			doc.IssuedAt.Format(time.RFC3339), doc.NotAfter.Format(time.RFC3339), at.UTC().Format(time.RFC3339))
	}
	c := doc.Claims
	c.Type, c.Insecure = attest.Sim, true
	c.NotBefore, c.NotAfter = doc.IssuedAt, doc.NotAfter
	return &c, nil
}

// Fingerprint names a simulation key as verifiers report it:
// sha256:HEX of its PKIX DER.
func Fingerprint(key *ecdsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return "sha256:?"
	}
	return fingerprint(der)
}

func fingerprint(der []byte) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(der))
}

func trustedKey(key *ecdsa.PublicKey, trusted []*ecdsa.PublicKey) bool {
	for _, t := range trusted {
		if t != nil && key.Equal(t) {
			return true
		}
	}
	return false
}
