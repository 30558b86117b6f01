package attest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// FuzzNotRevoked feeds CRLs as vendors and caches serve them (any bytes)
// to the revocation check: the answer is a named rejection or a next
// update, never a panic, and only a CRL of the issuer passes.
func FuzzNotRevoked(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fuzz CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	issuer, _ := x509.ParseCertificate(der)
	at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	crl, _ := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: at, NextUpdate: at.Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: big.NewInt(7), RevocationTime: at}}}, issuer, key)
	f.Add(crl)
	f.Add([]byte("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"))
	f.Add([]byte("3082"))
	revoked := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "revoked"}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		next, err := NotRevoked("fuzzed CRL", raw, issuer, at, revoked)
		if err != nil && CheckOf(err) == "" {
			t.Fatalf("not a named rejection: %v", err)
		}
		if err == nil && next.Before(at) {
			t.Fatalf("a CRL past its next update %s passed", next)
		}
	})
}
