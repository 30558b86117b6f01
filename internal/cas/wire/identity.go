package wire

import "github.com/cloister-cc/cloister/internal/attest"

// Identity is CAS's own: its TLS certificate (PEM) and evidence whose
// report data is the SHA-256 of the TLS key (PKIX DER).
type Identity struct {
	TLSCertificate string           `json:"tlsCertificate"`
	Evidence       *attest.Evidence `json:"evidence,omitempty"`
}

// PublicKey is GET /v1/public-key.
type PublicKey struct {
	// EncryptionKey seals policies to this CAS (empty until it is ready).
	EncryptionKey string `json:"encryptionKey,omitempty"`
	Identity
	State string `json:"state"`
	// StateReason says why CAS is in its state (e.g. what recovery waits for).
	StateReason string `json:"stateReason,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}
