package core

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
	"github.com/cloister-cc/cloister/internal/cas/store"
)

// material is a secret's value as stored.
type material struct {
	Kind  string `json:"kind"`
	Size  int    `json:"size"`
	Raw   []byte `json:"raw,omitempty"`   // symmetric key or plain value
	Cert  string `json:"cert,omitempty"`  // PEM
	Key   string `json:"key,omitempty"`   // PEM, PKCS #8
	Chain string `json:"chain,omitempty"` // PEM: cert, mesh CA, intermediate
}

// fields are what templates and the attest response see of it.
func (m *material) fields() map[string]string {
	switch m.Kind {
	case policy.ECDSACert, policy.RSACert:
		return map[string]string{"Cert": m.Cert, "Key": m.Key, "Chain": m.Chain}
	}
	return map[string]string{"Raw": string(m.Raw), "Hex": hex.EncodeToString(m.Raw), "Base64": base64.StdEncoding.EncodeToString(m.Raw)}
}

func secretKey(policyName, secret string) string { return policyName + "/" + secret }

// ensureSecrets gives every secret of doc its material in the same
// transaction as the policy: kept when a new version leaves the secret as
// it was, generated when it is new or its kind or size changed.
func ensureSecrets(etx store.Tx, k *keys, doc *policy.Document, now time.Time) error {
	for i := range doc.Secrets {
		sec := &doc.Secrets[i]
		raw, err := etx.Get(bucketSecrets, secretKey(doc.Name, sec.Name))
		if err != nil {
			return err
		}
		if raw != nil {
			var old material
			if json.Unmarshal(raw, &old) == nil && old.Kind == sec.Kind && old.Size == sec.KeySize() &&
				(sec.Kind != policy.Plain || string(old.Raw) == string(sec.Value)) {
				continue
			}
		}
		m, err := generate(k.authority, doc.Name, sec, now)
		if err != nil {
			return fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if err := etx.Put(bucketSecrets, secretKey(doc.Name, sec.Name), b); err != nil {
			return err
		}
	}
	return nil
}

// secretCertValidity: secret certificates are long-lived service keys.
const secretCertValidity = 365 * 24 * time.Hour

func generate(a *pki.Authority, policyName string, sec *policy.Secret, now time.Time) (*material, error) {
	m := &material{Kind: sec.Kind, Size: sec.KeySize()}
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
	m.Cert = string(pemCert(cert.Raw))
	m.Key = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	m.Chain = m.Cert + string(pemCert(a.Mesh.Cert.Raw)) + string(pemCert(a.Intermediate.Cert.Raw))
	return m, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
