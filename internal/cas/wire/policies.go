package wire

import (
	"crypto/ecdsa"
	"crypto/sha256"
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
	Predecessor string             `json:"predecessor,omitempty"`
	Policy      string             `json:"policy"`
	Signatures  []policy.Signature `json:"signatures"`
	Time        time.Time          `json:"time"`
	Signature   []byte             `json:"signature,omitempty"` // CAS's, over Hash
}

// Hash is the SHA-256 of the record without CAS's signature, hex.
func (r Record) Hash() string {
	r.Signature = nil
	b, _ := json.Marshal(r)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// VerifyHistory checks a history: versions 1, 2, ... each linked to the
// one before by hash and signed by key (CAS's history key).
func VerifyHistory(records []Record, key *ecdsa.PublicKey) error {
	prev := ""
	for i, r := range records {
		if r.Version != i+1 || r.Previous != prev {
			return fmt.Errorf("history[%d]: version %d links to %q, want version %d after %q", i, r.Version, r.Previous, i+1, prev)
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
}

// History is GET /v1/policies/{name}/history: the records, oldest first,
// and the key they are signed with (PEM).
type History struct {
	Records    []Record `json:"records"`
	HistoryKey string   `json:"historyKey"`
}
