package x509sign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"testing"
	"time"
)

func key(t testing.TB, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Certificate makes the certificate x509.CreateCertificate makes, byte
// for byte up to the signature, and the signature verifies with the
// issuer's key and no other.
func TestCertificateIsX509s(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	caKey, otherKey, leafKey := key(t, elliptic.P256()), key(t, elliptic.P256()), key(t, elliptic.P384())
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "web.shop"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"web"},
		URIs: []*url.URL{{Scheme: "spiffe", Host: "cas.example", Path: "/shop/web"}}, ExtraExtensions: []pkix.Extension{{Id: []int{1, 3, 6, 1, 4, 1, 99999, 1}, Value: []byte{4, 0}}}}
	want, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Certificate(tmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	wantCert, _ := x509.ParseCertificate(want)
	gotCert, err := x509.ParseCertificate(got)
	if err != nil {
		t.Fatalf("the certificate does not parse: %v", err)
	}
	if string(gotCert.RawTBSCertificate) != string(wantCert.RawTBSCertificate) {
		t.Error("the to-be-signed part differs from x509's")
	}
	if gotCert.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("signature algorithm %v", gotCert.SignatureAlgorithm)
	}
	if err := gotCert.CheckSignatureFrom(ca); err != nil {
		t.Errorf("the signature does not verify with the issuer's key: %v", err)
	}
	if err := gotCert.CheckSignature(gotCert.SignatureAlgorithm, gotCert.RawTBSCertificate, gotCert.Signature); err == nil {
		t.Error("the signature verifies with the leaf's own key")
	}
	if _, err := Certificate(tmpl, ca, &leafKey.PublicKey, otherKey); err == nil {
		t.Error("a key other than the parent's was taken") // x509 refuses it: the signer's key is not the parent's
	}
	if _, err := Certificate(tmpl, ca, &leafKey.PublicKey, key(t, elliptic.P384())); err == nil {
		t.Error("a P-384 key was taken")
	}
}

// CertificateRequest makes the CSR x509 makes, and it verifies.
func TestCertificateRequestIsX509s(t *testing.T) {
	k := key(t, elliptic.P256())
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w"}, DNSNames: []string{"w.example"}}
	want, _ := x509.CreateCertificateRequest(rand.Reader, tmpl, k)
	got, err := CertificateRequest(tmpl, k)
	if err != nil {
		t.Fatal(err)
	}
	wantCSR, _ := x509.ParseCertificateRequest(want)
	gotCSR, err := x509.ParseCertificateRequest(got)
	if err != nil {
		t.Fatalf("the CSR does not parse: %v", err)
	}
	if string(gotCSR.RawTBSCertificateRequest) != string(wantCSR.RawTBSCertificateRequest) {
		t.Error("the to-be-signed part differs from x509's")
	}
	if err := gotCSR.CheckSignature(); err != nil {
		t.Errorf("the CSR's signature does not verify: %v", err)
	}
}

func BenchmarkCertificateRequest(b *testing.B) {
	k := key(b, elliptic.P256())
	b.Run("x509", func(b *testing.B) {
		for b.Loop() {
			if _, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("x509sign", func(b *testing.B) {
		for b.Loop() {
			if _, err := CertificateRequest(&x509.CertificateRequest{}, k); err != nil {
				b.Fatal(err)
			}
		}
	})
}
