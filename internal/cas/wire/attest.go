// Package wire holds CAS's requests and responses as they travel between
// the server (package api) and its callers (package client, and through it
// the CLI, the operator, the initializer and the mesh): types, their JSON
// form, and the few pure functions both sides need to agree on (the key
// binding of report data, a policy history's hash chain). It links no
// server, no store and no PKI.
package wire

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/hpke"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"

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
	Certificate string `json:"certificate"`
	MeshCA      string `json:"meshCA"`
	RootCA      string `json:"rootCA"`
	// Owners name (fingerprints) the owners of the policy version the
	// workload attested against; none for an owner-less policy. A
	// workload pins them (the initializer's CLOISTER_POLICY_OWNERS), so a
	// policy of its name that others own gives it nothing it uses.
	Owners []string `json:"owners,omitempty"`
	// OwnerThreshold is how many of Owners sign a change of the policy.
	OwnerThreshold int `json:"ownerThreshold,omitempty"`
	// Mesh is what the service's mesh admits.
	Mesh MeshAuthz `json:"mesh"`
	// Sealed is the service's Content, sealed (HPKE) to the CSR's key:
	// only the workload holding the key its evidence binds can open it,
	// so a replayed request yields nothing usable, and CAS keeps no state
	// to refuse replays (any replica may answer).
	Sealed []byte `json:"sealed"`
	// Content is Sealed once opened (Open); it never travels in clear.
	Content `json:"-"`
}

// Content is what CAS seals to the workload.
type Content struct {
	Env   map[string]string `json:"env,omitempty"`
	Files map[string]string `json:"files,omitempty"`
	// Secrets the service may read, by name, then field (Raw, Hex,
	// Base64; Cert, Key, Chain).
	Secrets map[string]map[string]string `json:"secrets,omitempty"`
}

// The HPKE suite results are sealed with (RFC 9180): DHKEM over the CSR
// key's curve, HKDF-SHA256, AES-256-GCM; the info string binds the
// ciphertext to its use, policy and service.
var (
	resultKDF  = hpke.HKDFSHA256()
	resultAEAD = hpke.AES256GCM()
)

func resultInfo(policy, service string) []byte {
	return []byte("cloister.dev/attest-result/v1\n" + policy + "\n" + service)
}

// Seal seals c to key (the CSR's, ECDSA P-256 or P-384) for policy and
// service.
func Seal(key *ecdsa.PublicKey, policy, service string, c Content) ([]byte, error) {
	pub, err := key.ECDH()
	if err != nil {
		return nil, fmt.Errorf("csr: the key cannot be sealed to: %w", err)
	}
	pk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("csr: the key cannot be sealed to: %w", err)
	}
	plain, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return hpke.Seal(pk, resultKDF, resultAEAD, resultInfo(policy, service), plain)
}

// Open opens r.Sealed with the workload's key into r.Content.
func (r *AttestResult) Open(key *ecdsa.PrivateKey, policy, service string) error {
	priv, err := key.ECDH()
	if err != nil {
		return err
	}
	sk, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return err
	}
	plain, err := hpke.Open(sk, resultKDF, resultAEAD, resultInfo(policy, service), r.Sealed)
	if err != nil {
		return fmt.Errorf("opening what CAS sealed to this workload's key: %w", err)
	}
	var c Content
	if err := json.Unmarshal(plain, &c); err != nil {
		return fmt.Errorf("what CAS sealed: %w", err)
	}
	r.Content = c
	return nil
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
