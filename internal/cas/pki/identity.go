package pki

import (
	"crypto/sha256"
	"encoding/hex"
)

// TrustDomain is the CAS's trust domain in its workloads' mesh
// identities (wire.MeshID): a name of its root key, so two CASes never
// share one and nothing needs configuring.
func (a *Authority) TrustDomain() string {
	h := sha256.Sum256(a.Root.Cert.RawSubjectPublicKeyInfo)
	return "cas-" + hex.EncodeToString(h[:8]) + ".cloister"
}
