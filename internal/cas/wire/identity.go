package wire

import (
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Identity is CAS's own: its TLS certificate (PEM) and evidence whose
// report data is the SHA-256 of the TLS key (PKIX DER).
type Identity struct {
	TLSCertificate string           `json:"tlsCertificate"`
	Evidence       *attest.Evidence `json:"evidence,omitempty"`
	// Endorsements are the vendor collateral that judges an SGX or TDX
	// Evidence (Intel PCS TCB info, QE identity, their signing chain,
	// CRLs), when CAS has it, so a client needs no PCS of its own. A
	// client checks them against the vendor's root as it checks any
	// collateral: passing them on admits nothing they do not.
	Endorsements *Endorsements `json:"endorsements,omitempty"`
}

// Endorsements are Intel PCS collateral, as delivered (base64 in JSON).
type Endorsements struct {
	TCBInfo      []byte `json:"tcbInfo"`
	QEIdentity   []byte `json:"qeIdentity"`
	SigningChain []byte `json:"signingChain"`
	PCKCRL       []byte `json:"pckCRL,omitempty"`
	RootCRL      []byte `json:"rootCRL,omitempty"`
}

// PublicKey is GET /v1/public-key.
type PublicKey struct {
	// EncryptionKey seals policies to this CAS (empty until it is ready).
	EncryptionKey string `json:"encryptionKey,omitempty"`
	Identity
	State string `json:"state"`
	// StateReason says why CAS is in its state (e.g. what recovery waits for).
	StateReason string `json:"stateReason,omitempty"`
	// StateProblem is ProblemRolledBack or ProblemLost when the state is
	// older than one this replica served, or gone.
	StateProblem string `json:"stateProblem,omitempty"`
	// StateMark is the replica's high-water mark of the state, once CAS
	// was initialised.
	StateMark *StateMark `json:"stateMark,omitempty"`
	// SimulationKeys name (sha256:HEX of the PKIX key) the simulation
	// keys whose workload evidence a simulated CAS takes: its LAS nodes'
	// and those named to it.
	SimulationKeys []string `json:"simulationKeys,omitempty"`
	// Board names (fingerprints) the keys that approve new policy names,
	// once CAS is ready.
	Board []string `json:"board,omitempty"`
	// BoardThreshold is how many of Board approve a name or a wildcard.
	BoardThreshold int `json:"boardThreshold,omitempty"`
	// BoardVersion counts the board's changes (0: as given at init).
	BoardVersion int `json:"boardVersion,omitempty"`
	// Collateral is the state of the vendor collateral CAS caches, when
	// it fetches any.
	Collateral *CollateralHealth `json:"collateral,omitempty"`
}

// CollateralHealth is the state of CAS's cache of vendor collateral.
type CollateralHealth struct {
	Entries int `json:"entries"`
	// Stale entries are served from the cache while their vendor fails.
	Stale int `json:"stale,omitempty"`
	// Expired entries are past their next update: evidence that needs
	// them is refused until the vendor answers.
	Expired int `json:"expired,omitempty"`
	// NextUpdate is the earliest next update of any entry.
	NextUpdate *time.Time `json:"nextUpdate,omitempty"`
}

// LogKey is CAS's transparency log: its origin (the first line of its
// checkpoints) and the verifier key (C2SP signed-note) that signs them,
// derived from CAS's seed.
type LogKey struct {
	Origin string `json:"origin"`
	Key    string `json:"key"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
	// Reason is one of the Reason constants, or for a refused attestation
	// the check that failed.
	Reason string `json:"reason"`
}

// Reasons of error responses, for clients to act on.
const (
	ReasonTooManyRequests = "too-many-requests"
	ReasonContentType     = "content-type"
	ReasonTooLarge        = "too-large"
	ReasonMalformed       = "malformed"
	ReasonUnauthorized    = "unauthorized"
	ReasonInvalid         = "invalid"
	ReasonNotFound        = "not-found"
	ReasonInitialized     = "initialized"
	ReasonUninitialized   = "uninitialized"
	ReasonRecovery        = "recovery"
	ReasonInternal        = "internal"
	// ReasonConflict: a policy signed for another place in its chain.
	ReasonConflict = "version-conflict"
	// ReasonSuperseded: a policy version CAS held and has replaced since.
	ReasonSuperseded = "superseded"
	// ReasonNameTaken: a name (a certificate's) that another policy holds.
	ReasonNameTaken = "name-taken"
	// ReasonQuota: a new policy name beyond CAS's or its namespace's quota.
	ReasonQuota = "quota-exceeded"
)
