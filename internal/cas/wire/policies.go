package wire

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// Record is one version in a policy's history: hash-chained to the one
// before and signed by CAS's history key.
type Record struct {
	Name     string `json:"name"`
	Version  int    `json:"version"`
	Digest   string `json:"digest"`
	Previous string `json:"previous,omitempty"` // Hash of the record before
	// Predecessor is the digest of the version before as the owners
	// signed it (the record's Digest there), empty for version 1.
	Predecessor string `json:"predecessor,omitempty"`
	// Policy is the document, served only to those its read access
	// admits; without the values of plain secrets (Redacted) it is the
	// canonical JSON of the rest.
	Policy string `json:"policy,omitempty"`
	// PolicyHash is the SHA-256 of Policy, hex: the record's hash covers
	// it rather than the document, so a public record without the
	// document still verifies. Records written before it have none.
	PolicyHash string `json:"policyHash,omitempty"`
	Redacted   bool   `json:"redacted,omitempty"`
	// Read is the version's read access (policy.ReadOwners, ReadAny).
	Read       string             `json:"read,omitempty"`
	Signatures []policy.Signature `json:"signatures"`
	Time       time.Time          `json:"time"`
	Signature  []byte             `json:"signature,omitempty"` // CAS's, over Hash
}

// Hash is the SHA-256 of the record without CAS's signature, hex; with a
// PolicyHash, without the document too.
func (r Record) Hash() string {
	r.Signature = nil
	if r.PolicyHash != "" {
		r.Policy = ""
	}
	b, _ := json.Marshal(r)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// HashText is PolicyHash's form.
func HashText(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Public is the record as anyone may read it: without the document
// unless the version's read access is "any".
func (r Record) Public() Record {
	if r.Read != policy.ReadAny {
		r.Policy = ""
	}
	return r
}

// VerifyHistory checks a history: versions 1, 2, ... each linked to the
// one before by hash and signed by key (CAS's history key).
func VerifyHistory(records []Record, key *ecdsa.PublicKey) error {
	prev := ""
	for i, r := range records {
		if r.Version != i+1 || r.Previous != prev {
			return fmt.Errorf("history[%d]: version %d links to %q, want version %d after %q", i, r.Version, r.Previous, i+1, prev)
		}
		if r.Policy != "" && r.PolicyHash != "" && HashText(r.Policy) != r.PolicyHash {
			return fmt.Errorf("history[%d]: the document of version %d does not match its hash", i, r.Version)
		}
		h, _ := hex.DecodeString(r.Hash())
		if !ecdsa.VerifyASN1(key, h, r.Signature) {
			return fmt.Errorf("history[%d]: CAS's signature does not verify", i)
		}
		prev = r.Hash()
	}
	return nil
}

// Registration is the outcome of a policy submission.
type Registration struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Digest  string `json:"digest"`
	// Predecessor is the digest of the version before; empty for 1.
	Predecessor string `json:"predecessor,omitempty"`
	// Unchanged: the same content as the current version; nothing stored.
	Unchanged bool `json:"unchanged,omitempty"`
}

// PolicyRequest is POST /v1/policies: the spec of a SignedPolicy
// (policy, signatures) or of an EncryptedPolicy (policy, encryptionKey).
type PolicyRequest struct {
	CASAddress string `json:"casAddress,omitempty"`
	Policy     string `json:"policy"`
	// Version and Predecessor are the link the signatures approve.
	policy.Link
	Signatures    []policy.Signature `json:"signatures,omitempty"`
	EncryptionKey string             `json:"encryptionKey,omitempty"`
	// Namespace, when set, confines the request to policies named
	// NAMESPACE/NAME: the operator sends its resource's Kubernetes
	// namespace, so that a tenant's resources register only its names.
	Namespace string `json:"namespace,omitempty"`
}

// History is GET /v1/policies/{name}/history: the records, oldest first,
// and the key they are signed with (PEM).
type History struct {
	Records    []Record `json:"records"`
	HistoryKey string   `json:"historyKey"`
}

// Challenge is GET /v1/challenge: a value CAS made and can recognise
// until Expires, for an owner to sign in a read request. CAS keeps no
// state for it, so any replica that holds the seed accepts it.
type Challenge struct {
	Challenge string    `json:"challenge"`
	Expires   time.Time `json:"expires"`
}

// ReadRequest is POST /v1/policies/{name}/read: an owner's signature over
// the policy's name and a fresh challenge.
type ReadRequest struct {
	Challenge string `json:"challenge"`
	// Signer is the owner key's fingerprint (policy.Fingerprint).
	Signer string `json:"signer"`
	// Signature is ASN.1 ECDSA over ReadDigest, base64.
	Signature string `json:"signature"`
}

// readContext separates read requests from every other use of an owner
// key.
const readContext = "cloister.dev/policy-read/v1\n"

// ReadDigest is what an owner signs to read policy name.
func ReadDigest(name, challenge string) []byte {
	b, _ := json.Marshal(struct {
		Name      string `json:"name"`
		Challenge string `json:"challenge"`
	}{name, challenge})
	h := sha256.Sum256(append([]byte(readContext), b...))
	return h[:]
}

// SignRead makes an owner's read request for policy name.
func SignRead(key *ecdsa.PrivateKey, name, challenge string) (ReadRequest, error) {
	sig, err := ecdsa.SignASN1(rand.Reader, key, ReadDigest(name, challenge))
	if err != nil {
		return ReadRequest{}, err
	}
	return ReadRequest{Challenge: challenge, Signer: policy.Fingerprint(&key.PublicKey), Signature: base64.StdEncoding.EncodeToString(sig)}, nil
}
