// Package secret owns the secrets CAS makes for a policy: their material
// as stored (a random key, a plain value, a key pair with its
// certificate), made anew only when the secret changes; the workload
// secrets it derives from its seed by id instead of storing them; and
// what templates and attested workloads see of both.
package secret

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
)

// Material is a secret's value as CAS stores it.
type Material struct {
	Kind  string `json:"kind"`
	Size  int    `json:"size"`
	Raw   []byte `json:"raw,omitempty"`   // symmetric key or plain value
	Cert  string `json:"cert,omitempty"`  // PEM
	Key   string `json:"key,omitempty"`   // PEM, PKCS #8
	Chain string `json:"chain,omitempty"` // PEM: cert, mesh CA, intermediate
}

// Fields are what templates and the attest response see of it.
func (m *Material) Fields() map[string]string {
	switch m.Kind {
	case policy.ECDSACert, policy.RSACert:
		return map[string]string{"Cert": m.Cert, "Key": m.Key, "Chain": m.Chain}
	}
	return map[string]string{"Raw": string(m.Raw), "Hex": hex.EncodeToString(m.Raw), "Base64": base64.StdEncoding.EncodeToString(m.Raw)}
}

// WorkloadSecretSize is a workload secret's size: an AES-256 key, or a
// seed a workload derives its own keys from.
const WorkloadSecretSize = 32

// WorkloadLabel is what CAS derives the workload secret id of the policy
// named policyName from its seed under: each part length-prefixed, so no
// two (policy, id) pairs share a label.
func WorkloadLabel(policyName, id string) string {
	return fmt.Sprintf("workload-secret/%d:%s/%d:%s", len(policyName), policyName, len(id), id)
}

// Workload is the workload secret id of the policy named policyName,
// derived from s: nothing stores it, so it is the same after a restart,
// a recovery and on every replica of CAS.
func Workload(s seed.Seed, policyName, id string) *Material {
	return &Material{Kind: policy.SymmetricKey, Size: WorkloadSecretSize, Raw: s.Key(WorkloadLabel(policyName, id), WorkloadSecretSize)}
}

// Keeps says whether stored material still serves sec: a new version
// keeps a secret's material while the secret stays as it was.
func Keeps(raw []byte, sec *policy.Secret) bool {
	var old Material
	return raw != nil && json.Unmarshal(raw, &old) == nil && old.Kind == sec.Kind && old.Size == sec.KeySize() &&
		(sec.Kind != policy.Plain || string(old.Raw) == string(sec.Value))
}

// secretCertValidity: secret certificates are long-lived service keys.
const secretCertValidity = 365 * 24 * time.Hour

// Make makes new material for sec of the policy named policyName: a
// random key, the plain value, or a key pair with a certificate the
// authority issues.
func Make(a *pki.Authority, policyName string, sec *policy.Secret, now time.Time) (*Material, error) {
	m := &Material{Kind: sec.Kind, Size: sec.KeySize()}
	switch sec.Kind {
	case policy.Plain:
		m.Raw = sec.Value
		return m, nil
	case policy.SymmetricKey:
		m.Raw = make([]byte, m.Size)
		_, err := rand.Read(m.Raw)
		return m, err
	}
	var key crypto.Signer
	var err error
	if sec.Kind == policy.RSACert {
		key, err = rsa.GenerateKey(rand.Reader, m.Size)
	} else {
		curve := elliptic.P256()
		if m.Size == 384 {
			curve = elliptic.P384()
		}
		key, err = ecdsa.GenerateKey(curve, rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	cert, err := a.Issue(pki.Request{PublicKey: key.Public(), CommonName: policyName + "/" + sec.Name, SANs: nil, Validity: secretCertValidity, Now: now})
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	m.Cert = string(pki.CertPEM(cert.Raw))
	m.Key = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	m.Chain = m.Cert + a.PEMs().Chain
	return m, nil
}
