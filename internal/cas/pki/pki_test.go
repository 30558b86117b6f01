package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/seed"
)

var now = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

func csr(t testing.TB, key any) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "ignored"}, DNSNames: []string{"evil.example"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestIssueVerifiesToTheRoot(t *testing.T) {
	s := seed.New()
	a, err := New(s, "cas", now)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	req, err := ParseCSR(csr(t, key))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := a.Issue(Request{PublicKey: req.PublicKey, CommonName: "api.payments", SANs: []string{"api.payments.svc", "10.0.0.7"}, Validity: time.Hour, Claims: []byte(`{"type":"sim"}`), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(a.Root.Cert)
	inter.AddCert(a.Intermediate.Cert)
	inter.AddCert(a.Mesh.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "api.payments.svc", CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("leaf does not verify to the root: %v", err)
	}
	mesh := x509.NewCertPool()
	mesh.AddCert(a.Mesh.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: mesh, CurrentTime: now}); err != nil {
		t.Errorf("leaf does not verify to the mesh CA alone: %v", err)
	}
	// The policy names the certificate, not the CSR.
	if leaf.Subject.CommonName != "api.payments" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "api.payments.svc" || len(leaf.IPAddresses) != 1 {
		t.Errorf("names %s %v %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}
	if got, ok := Claims(leaf); !ok || string(got) != `{"type":"sim"}` {
		t.Errorf("claims %q %v", got, ok)
	}
	if !leaf.NotAfter.Equal(now.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("not after %s", leaf.NotAfter)
	}
}

// The CAs' keys come from the seed: stored certificates load with the
// same seed and are refused with another.
func TestLoad(t *testing.T) {
	s := seed.New()
	a, _ := New(s, "cas", now)
	back, err := Load(s, a.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Root.Cert.Raw, a.Root.Cert.Raw) || !back.Mesh.Key.Equal(a.Mesh.Key) {
		t.Error("loaded authority differs")
	}
	if _, err := Load(seed.New(), a.Marshal()); err == nil || !strings.Contains(err.Error(), "another seed's") {
		t.Errorf("another seed: %v", err)
	}
}

func TestParseCSRRejects(t *testing.T) {
	small, _ := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // a weak key, to check that it is refused
	good, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tampered := csr(t, good)
	block, _ := pem.Decode(tampered)
	block.Bytes[len(block.Bytes)-3] ^= 1
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"garbage":       {[]byte("hello"), "csr: "},
		"certificate":   {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "want CERTIFICATE REQUEST"},
		"bad signature": {pem.EncodeToMemory(block), "signature"},
		"small RSA":     {csr(t, small), "an RSA key of 1024 bits"},
	} {
		if _, err := ParseCSR(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func BenchmarkIssue(b *testing.B) {
	a, _ := New(seed.New(), "cas", now)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	req, _ := x509.ParseCertificateRequest(der)
	for b.Loop() {
		if _, err := a.Issue(Request{PublicKey: req.PublicKey, CommonName: "x", SANs: []string{"x"}, Validity: time.Hour, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
}

// Whatever a workload sends as its CSR, ParseCSR returns one whose
// signature verifies with an accepted key, or an error.
func FuzzParseCSR(f *testing.F) {
	good, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.Add(csr(f, good))
	block, _ := pem.Decode(csr(f, good))
	f.Add(block.Bytes)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCSR(data)
		if err != nil {
			return
		}
		if c.CheckSignature() != nil {
			t.Fatalf("accepted a CSR whose signature does not verify: %q", data)
		}
		switch c.PublicKey.(type) {
		case *ecdsa.PublicKey, *rsa.PublicKey:
		default:
			t.Fatalf("accepted a %T key", c.PublicKey)
		}
	})
}
