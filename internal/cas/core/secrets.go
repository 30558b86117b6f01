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

// A new version keeps a secret's material while the secret stays as it
// was, and gets new material when the secret is new or its kind or size
// changed. Making material (a key pair) takes time, so it happens outside
// the registration lock and the store's transaction: secretsToMake says
// what a version needs, makeSecrets makes it, putSecrets stores it with
// the version.

// testHookMakeSecrets, set by tests only, runs as material is made.
var testHookMakeSecrets func(policy string)

// keeps says whether stored material still serves sec.
func keeps(raw []byte, sec *policy.Secret) bool {
	var old material
	return raw != nil && json.Unmarshal(raw, &old) == nil && old.Kind == sec.Kind && old.Size == sec.KeySize() &&
		(sec.Kind != policy.Plain || string(old.Raw) == string(sec.Value))
}

// secretsToMake are the secrets of doc that need new material which made
// does not hold.
func (c *CAS) secretsToMake(k *keys, doc *policy.Document, made map[string]*material) ([]*policy.Secret, error) {
	var need []*policy.Secret
	err := k.enc.View(c.cfg.Store, func(etx store.Tx) error {
		for i := range doc.Secrets {
			sec := &doc.Secrets[i]
			raw, err := etx.Get(bucketSecrets, secretKey(doc.Name, sec.Name))
			if err != nil {
				return err
			}
			if m := made[sec.Name]; keeps(raw, sec) || (m != nil && m.Kind == sec.Kind && m.Size == sec.KeySize()) {
				continue
			}
			need = append(need, sec)
		}
		return nil
	})
	return need, err
}

// makeSecrets makes material for secrets; it holds no lock.
func (c *CAS) makeSecrets(doc *policy.Document, secrets []*policy.Secret) (map[string]*material, error) {
	if testHookMakeSecrets != nil {
		testHookMakeSecrets(doc.Name)
	}
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	made := make(map[string]*material, len(secrets))
	for _, sec := range secrets {
		m, err := generate(k.authority, doc.Name, sec, c.cfg.Clock.Now())
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		made[sec.Name] = m
	}
	return made, nil
}

// putSecrets stores, in the version's transaction, the material of each
// secret of doc whose stored material no longer serves it.
func putSecrets(etx store.Tx, doc *policy.Document, made map[string]*material) error {
	for i := range doc.Secrets {
		sec := &doc.Secrets[i]
		raw, err := etx.Get(bucketSecrets, secretKey(doc.Name, sec.Name))
		if err != nil {
			return err
		}
		if keeps(raw, sec) {
			continue
		}
		m := made[sec.Name]
		if m == nil {
			return fmt.Errorf("secret %s: no material made for it", sec.Name) // secretsToMake said otherwise
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
