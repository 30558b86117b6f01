// Package pki owns CAS's certificate authorities: a root CA, an
// intermediate and the mesh CA that signs workload certificates. Their
// keys are derived from the seed, never stored, so a recovered CAS has the
// same CAs; their certificates are made once, at initialisation, and kept
// in the state. Workload certificates carry the attested claims in an
// extension.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"math/big"
	"strconv"
	"sync"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/seed"
)

// ClaimsOID marks the extension with the attested claims (JSON in an
// OCTET STRING). The arc is Cloister's own and unregistered: ask IANA for
// a Private Enterprise Number before a stable release and move it there.
var ClaimsOID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 64983, 1, 1}

// CA is a certificate with its key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Authority is CAS's CA hierarchy.
type Authority struct {
	Root, Intermediate, Mesh CA
	pems                     func() CAPEMs
}

// CAPEMs are the CA certificates in PEM as workloads receive them.
type CAPEMs struct {
	Root, Mesh string
	// Chain is what follows a workload's certificate in its chain: the
	// mesh CA, then the intermediate.
	Chain string
}

// PEMs are a's CA certificates in PEM, encoded once.
func (a *Authority) PEMs() CAPEMs {
	if a.pems == nil { // an Authority not made by New or Load
		return a.encodePEMs()
	}
	return a.pems()
}

func (a *Authority) encodePEMs() CAPEMs {
	mesh := string(CertPEM(a.Mesh.Cert.Raw))
	return CAPEMs{Root: string(CertPEM(a.Root.Cert.Raw)), Mesh: mesh, Chain: mesh + string(CertPEM(a.Intermediate.Cert.Raw))}
}

// withPEMs has a encode its PEMs once, when first asked.
func (a *Authority) withPEMs() *Authority {
	a.pems = sync.OnceValue(a.encodePEMs)
	return a
}

// Lifetimes of the CAs.
const (
	rootLifetime         = 20 * 365 * 24 * time.Hour
	intermediateLifetime = 10 * 365 * 24 * time.Hour
	meshLifetime         = 5 * 365 * 24 * time.Hour
)

// DeriveKey makes the P-256 key for label from the seed: the same seed
// always gives the same key.
func DeriveKey(s seed.Seed, label string) *ecdsa.PrivateKey {
	for i := 0; ; i++ {
		// A 32-byte string is at or above the P-256 order with
		// probability 2^-32; try the next counter then.
		k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), s.Key("pki/"+label+"/"+strconv.Itoa(i), 32))
		if err == nil {
			return k
		}
	}
}

// New makes the CA certificates for a freshly initialised seed.
func New(s seed.Seed, name string, now time.Time) (*Authority, error) {
	a := &Authority{
		Root:         CA{Key: DeriveKey(s, "root")},
		Intermediate: CA{Key: DeriveKey(s, "intermediate")},
		Mesh:         CA{Key: DeriveKey(s, "mesh")},
	}
	var err error
	if a.Root.Cert, err = caCert(name+" root CA", now, rootLifetime, a.Root.Key, nil, 2); err != nil {
		return nil, err
	}
	if a.Intermediate.Cert, err = caCert(name+" intermediate CA", now, intermediateLifetime, a.Intermediate.Key, &a.Root, 1); err != nil {
		return nil, err
	}
	if a.Mesh.Cert, err = caCert(name+" mesh CA", now, meshLifetime, a.Mesh.Key, &a.Intermediate, 0); err != nil {
		return nil, err
	}
	return a.withPEMs(), nil
}

// caCert makes a CA certificate for key, signed by parent (self-signed
// when parent is nil).
func caCert(cn string, now time.Time, life time.Duration, key *ecdsa.PrivateKey, parent *CA, pathLen int) (*x509.Certificate, error) {
	pub := &key.PublicKey
	signerKey := crypto.Signer(key)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Cloister CAS"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(life),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            pathLen,
		MaxPathLenZero:        pathLen == 0,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	signerCert := tmpl
	if parent != nil {
		signerCert, signerKey = parent.Cert, parent.Key
		tmpl.NotAfter = earlier(tmpl.NotAfter, parent.Cert.NotAfter)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, pub, signerKey)
	if err != nil {
		return nil, fmt.Errorf("making %s: %w", cn, err)
	}
	return x509.ParseCertificate(der)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("pki: reading randomness: " + err.Error())
	}
	return n.Add(n, big.NewInt(1))
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
