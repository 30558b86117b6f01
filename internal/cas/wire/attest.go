// Package wire holds CAS's requests and responses as they travel between
// the server (package api) and its callers (package client, and through it
// the CLI, the operator, the initializer and the mesh): types, their JSON
// form, and the few pure functions both sides need to agree on (the key
// binding of report data, a policy history's hash chain). It links no
// server, no store and no PKI.
package wire

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"

	"github.com/cloister-cc/cloister/internal/attest"
)

// AttestRequest is a workload asking for what its policy gives it.
type AttestRequest struct {
	Policy   string          `json:"policy"`
	Service  string          `json:"service"`
	Evidence attest.Evidence `json:"evidence"`
	// CSR (PEM or DER) for the workload's key; the evidence's report data
	// must start with the SHA-256 of that key (PKIX DER).
	CSR []byte `json:"csr"`
}

// AttestResult is what an attested workload gets.
type AttestResult struct {
	// Certificate is the workload's chain (PEM): its certificate, the mesh
	// CA, the intermediate.
	Certificate string            `json:"certificate"`
	MeshCA      string            `json:"meshCA"`
	RootCA      string            `json:"rootCA"`
	Env         map[string]string `json:"env,omitempty"`
	Files       map[string]string `json:"files,omitempty"`
	// Secrets the service may read, by name, then field (Raw, Hex,
	// Base64; Cert, Key, Chain).
	Secrets map[string]map[string]string `json:"secrets,omitempty"`
}

// KeyBinding is the report data that binds a key (a CSR's, or CAS's own
// TLS key): SHA-256 of its PKIX DER, the first 32 bytes of the evidence's
// report data.
func KeyBinding(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(der)
	return h[:], nil
}

// CAs are the certificates workloads and their users trust: the root
// (pinned by data owners) and the mesh CA (which issues workload
// certificates).
type CAs struct {
	RootCA string `json:"rootCA"`
	MeshCA string `json:"meshCA"`
}
