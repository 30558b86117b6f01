package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// A workload certificate names its workload: one spiffe URI SAN with the
// issuing CAS's trust domain (another CAS has another), the policy and
// the service; the identity a certificate carries reads back.
func TestWorkloadIdentity(t *testing.T) {
	a, err := New(seed.New(), "cas", now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(seed.New(), "cas", now)
	if a.TrustDomain() == b.TrustDomain() || !strings.HasPrefix(a.TrustDomain(), "cas-") {
		t.Errorf("trust domains %q and %q", a.TrustDomain(), b.TrustDomain())
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf, err := a.Issue(Request{PublicKey: &key.PublicKey, CommonName: "web.shop", SANs: []string{"web.shop.svc"},
		Identity: wire.MeshID{TrustDomain: "forged.example", Policy: "shop", Service: "web"}, Validity: 24 * time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	id, err := wire.CertMeshID(leaf)
	if want := (wire.MeshID{TrustDomain: a.TrustDomain(), Policy: "shop", Service: "web"}); err != nil || id != want {
		t.Errorf("identity %+v (%v), want %+v: the authority's own trust domain", id, err, want)
	}
	if got := id.String(); got != "spiffe://"+a.TrustDomain()+"/policy/shop/service/web" {
		t.Errorf("URI %s", got)
	}
	plain, _ := a.Issue(Request{PublicKey: &key.PublicKey, CommonName: "x", Validity: time.Hour, Now: now})
	if _, err := wire.CertMeshID(plain); err == nil || !strings.Contains(err.Error(), "has 0 workload identities") {
		t.Errorf("a certificate without an identity: %v", err)
	}
	for _, bad := range []string{"https://d/policy/p/service/s", "spiffe:///policy/p/service/s", "spiffe://d/policy/p", "spiffe://d/policy//service/s",
		"spiffe://d/policy/p/service/s/x", "spiffe://u@d/policy/p/service/s", "spiffe://d/policy/p/service/s?q=1"} {
		if _, err := wire.ParseMeshID(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// CAS's own server certificate chains to its root under its trust domain,
// for serving only; another CAS's root does not take it.
func TestServerCertificate(t *testing.T) {
	a, _ := New(seed.New(), "cas", now)
	b, _ := New(seed.New(), "cas", now)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf, err := a.IssueServer(&key.PublicKey, now)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(root *x509.Certificate, name string, usage x509.ExtKeyUsage) error {
		roots, inter := x509.NewCertPool(), x509.NewCertPool()
		roots.AddCert(root)
		inter.AddCert(a.Intermediate.Cert)
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	if err := verify(a.Root.Cert, a.TrustDomain(), x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("CAS's server certificate under its trust domain: %v", err)
	}
	for name, err := range map[string]error{
		"another name":       verify(a.Root.Cert, "vault.team.svc", x509.ExtKeyUsageServerAuth),
		"another CAS's root": verify(b.Root.Cert, a.TrustDomain(), x509.ExtKeyUsageServerAuth),
		"as a client":        verify(a.Root.Cert, a.TrustDomain(), x509.ExtKeyUsageClientAuth),
	} {
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	if !leaf.NotAfter.Equal(now.Add(ServerValidity)) {
		t.Errorf("valid until %s", leaf.NotAfter)
	}
}
