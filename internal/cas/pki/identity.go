package pki

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// TrustDomain is the CAS's trust domain in its workloads' mesh
// identities (wire.MeshID), and the name CAS serves its workloads' TLS
// under: a name of its root key, so two CASes never share one and nothing
// needs configuring, in a domain no policy's certificate may name.
func (a *Authority) TrustDomain() string {
	h := sha256.Sum256(a.Root.Cert.RawSubjectPublicKeyInfo)
	return "cas-" + hex.EncodeToString(h[:8]) + "." + policy.ReservedDomain
}
