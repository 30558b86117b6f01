package wire

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/cloister-cc/cloister/internal/cas/seed"
)

// State is where CAS is in its lifecycle.
type State string

const (
	Uninitialized State = "uninitialized"
	RecoveryMode  State = "recovery"
	Ready         State = "ready"
)

// SealedShare is one recovery owner's share, readable only with their key.
type SealedShare struct {
	Owner  string `json:"owner"` // the owner key's fingerprint
	Sealed []byte `json:"sealed"`
}

// Shares is what init returns to its caller (cloister cas init --out):
// CAS keeps none of it.
type Shares struct {
	Threshold int           `json:"threshold"`
	Shares    []SealedShare `json:"shares"`
	// RootCA is the CAS root certificate (PEM), to pin.
	RootCA string `json:"rootCA"`
}

// InitRequest is POST /v1/init.
type InitRequest struct {
	// RecoveryOwners are P-256 public keys (PEM), one share each.
	RecoveryOwners []string `json:"recoveryOwners"`
	Threshold      int      `json:"threshold"`
	// Token is the one-time init token CAS was started with.
	Token string `json:"token"`
	// Board are P-256 public keys (PEM) that approve new policy names;
	// empty: the recovery owners.
	Board []string `json:"board,omitempty"`
	// BoardThreshold is how many of Board approve a new name or a
	// wildcard; 0: a majority.
	BoardThreshold int `json:"boardThreshold,omitempty"`
	// Approvals, in place of the token, are the signatures of the
	// recovery owners of the CAS whose state was lost (its StateMark),
	// at their threshold, over InitDigest: after a loss only they decide
	// that CAS starts anew.
	Approvals []OwnerSignature `json:"approvals,omitempty"`
}

// OwnerSignature is a recovery owner's signature: the owner's public key
// (PEM), whose fingerprint must be among the recovery owners', and an
// ASN.1 ECDSA signature (base64) over the digest its use names.
type OwnerSignature struct {
	Key       string `json:"key"`
	Signature string `json:"signature"`
}

// InitDigest is what a recovery owner of the CAS whose mark's check is
// check signs to let it be initialised anew with req's owners and board
// (fingerprints, sorted) and thresholds.
func InitDigest(check []byte, owners []string, threshold int, board []string, boardThreshold int) []byte {
	b, _ := json.Marshal(struct {
		Kind           string   `json:"kind"`
		CAS            []byte   `json:"cas"`
		Owners         []string `json:"owners"`
		Threshold      string   `json:"threshold"`
		Board          []string `json:"board"`
		BoardThreshold string   `json:"boardThreshold"`
	}{"cloister.dev/init-after-loss/v1", check, slices.Sorted(slices.Values(owners)), strconv.Itoa(threshold),
		slices.Sorted(slices.Values(board)), strconv.Itoa(boardThreshold)})
	h := sha256.Sum256(b)
	return h[:]
}

// StateMark is the high-water mark a replica keeps of the state it
// served: once initialised, CAS never serves an older state, nor is it
// initialised again by a token.
type StateMark struct {
	// Generation is the highest generation of the state CAS served.
	Generation uint64 `json:"generation"`
	// Owners (fingerprints) and Threshold are the recovery owners, who
	// decide after a loss.
	Owners    []string `json:"owners"`
	Threshold int      `json:"threshold"`
	// Check names the CAS: what the owners sign an acceptance or an
	// init after a loss for.
	Check []byte `json:"check"`
}

// Problems with CAS's state (PublicKey.StateProblem).
const (
	// ProblemRolledBack: the state is older than one CAS served.
	ProblemRolledBack = "rolled-back"
	// ProblemLost: CAS was initialised and its state is gone.
	ProblemLost = "lost"
	// ProblemReplaced: the state is another CAS's than the one served.
	ProblemReplaced = "replaced"
)

// RecoverRequest is POST /v1/recover: one owner's opened share.
type RecoverRequest struct {
	Share seed.Share `json:"share"`
	// Accept is this owner's acceptance of a state older than one CAS
	// served: CAS unlocks it only with its threshold of acceptances of
	// its generation.
	Accept *Acceptance `json:"accept,omitempty"`
	// Force takes the share though a ready replica of this CAS could hand
	// this one the seed (which it does, attested, with no owner acting).
	Force bool `json:"force,omitempty"`
}

// RecoverResponse says how many shares are still needed.
type RecoverResponse struct {
	Needed int    `json:"needed"`
	State  string `json:"state"`
}

// Acceptance is a recovery owner's signature over AcceptDigest, accepting
// the state at Generation of this CAS.
type Acceptance struct {
	Generation uint64 `json:"generation"`
	OwnerSignature
}

// AcceptDigest is what a recovery owner signs to accept the state at
// generation of the CAS whose mark's check is check.
func AcceptDigest(check []byte, generation uint64) []byte {
	b, _ := json.Marshal(struct {
		Kind       string `json:"kind"`
		CAS        []byte `json:"cas"`
		Generation string `json:"generation"`
	}{"cloister.dev/accept-generation/v1", check, strconv.FormatUint(generation, 10)})
	h := sha256.Sum256(b)
	return h[:]
}
