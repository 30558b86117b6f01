// Package meshtest is a mesh CA for tests: real keys and certificates,
// written as the initializer writes them.
package meshtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// CA is a mesh CA. Its workloads' mesh identities are of TrustDomain,
// of policy Policy unless a call names another.
type CA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	PEM  []byte
}

// The test CA's trust domain and default policy.
const (
	TrustDomain = "test.cloister"
	Policy      = "mesh"
)

// NewCA makes a CA valid for an hour.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{key: key, cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool holds the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

var serial atomic.Int64

func init() { serial.Store(100) }

// issue makes a workload certificate for cn (and 127.0.0.1), service cn
// of policy: its PEM chain and key, and its serial number.
func (ca *CA) issue(t testing.TB, cn, policy string) (chain, key []byte, n int64) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	n = serial.Add(1)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{cn}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:        []*url.URL{wire.MeshID{TrustDomain: TrustDomain, Policy: policy, Service: cn}.URI()},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), n
}

// Issue is a workload certificate for cn (service cn of Policy), for a
// TLS client or server.
func (ca *CA) Issue(t testing.TB, cn string) tls.Certificate {
	t.Helper()
	return ca.IssueAs(t, cn, Policy)
}

// IssueAs is Issue for service cn of policy.
func (ca *CA) IssueAs(t testing.TB, cn, policy string) tls.Certificate {
	t.Helper()
	chain, key, _ := ca.issue(t, cn, policy)
	c, err := tls.X509KeyPair(chain, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Write issues a workload certificate for cn (service cn of Policy,
// admitting and connecting to its own policy's workloads) into dir as the
// initializer writes it (each file renamed over the old one), and returns
// its serial number.
func (ca *CA) Write(t testing.TB, dir, cn string) int64 {
	t.Helper()
	return ca.WriteAs(t, dir, cn, Policy, wire.MeshAuthz{Allow: []string{Policy + "/*"}, Upstreams: []string{Policy + "/*"}})
}

// WriteAs is Write for service cn of policy with its mesh authorization.
func (ca *CA) WriteAs(t testing.TB, dir, cn, policy string, authz wire.MeshAuthz) int64 {
	t.Helper()
	chain, key, n := ca.issue(t, cn, policy)
	mesh, _ := json.Marshal(authz)
	_ = os.MkdirAll(dir, 0o700)
	for name, data := range map[string][]byte{casclient.CertChainFile: chain, casclient.KeyFile: key, casclient.MeshCAFile: ca.PEM,
		casclient.MeshFile: mesh} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return n
}
