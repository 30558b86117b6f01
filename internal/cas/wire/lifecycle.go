package wire

import "github.com/cloister-cc/cloister/internal/cas/seed"

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
}

// RecoverRequest is POST /v1/recover: one owner's opened share.
type RecoverRequest struct {
	Share seed.Share `json:"share"`
	// Force takes the share though a ready replica of this CAS could hand
	// this one the seed (which it does, attested, with no owner acting).
	Force bool `json:"force,omitempty"`
}

// RecoverResponse says how many shares are still needed.
type RecoverResponse struct {
	Needed int    `json:"needed"`
	State  string `json:"state"`
}
