package intelpcs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// testPCK is a PCK chain under the test signer's root: a PCK Platform CA
// and a PCK certificate. Trusted only here.
type testPCK struct {
	ca, leaf *x509.Certificate
	caKey    *ecdsa.PrivateKey
}

func (s *testSigner) pck(tb testing.TB) *testPCK {
	tb.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	from, to := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(0x956f5d), Subject: pkix.Name{CommonName: "Intel SGX PCK Platform CA"},
		NotBefore: from, NotAfter: to, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, s.root, &caKey.PublicKey, s.rootKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(0x7f8939), Subject: pkix.Name{CommonName: "Intel SGX PCK Certificate"},
		NotBefore: from, NotAfter: to, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	return &testPCK{ca: ca, leaf: leaf, caKey: caKey}
}

// makeCRL is a CRL by issuer (signed with key) listing serials, current from
// this to next.
func makeCRL(tb testing.TB, issuer *x509.Certificate, key *ecdsa.PrivateKey, this, next time.Time, serials ...*big.Int) []byte {
	tb.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: this, NextUpdate: next}
	for _, n := range serials {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: n, RevocationTime: this})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, issuer, key)
	if err != nil {
		tb.Fatal(err)
	}
	return der
}

func TestRevocation(t *testing.T) {
	s := newTestSigner(t)
	pck := s.pck(t)
	p := fuzzPlatform
	p.PCKChain = []*x509.Certificate{pck.leaf, pck.ca}
	base := Collateral{TCBInfo: s.envelope("tcbInfo", []byte(seedTCBInfo)),
		QEIdentity: s.envelope("enclaveIdentity", []byte(seedQEIdentity)), SigningChain: s.chain}
	month := 30 * 24 * time.Hour
	this, next := fuzzAt.Add(-month), fuzzAt.Add(month)
	pckCRL := makeCRL(t, pck.ca, pck.caKey, this, next)
	rootCRL := makeCRL(t, s.root, s.rootKey, this, next)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	with := func(pckCRL, rootCRL []byte) Collateral { c := base; c.PCKCRL, c.RootCRL = pckCRL, rootCRL; return c }
	for _, tc := range []struct {
		name    string
		c       Collateral
		require bool
		check   attest.Check
		reason  string
	}{
		{"no CRLs, none required", base, false, "", ""},
		{"no CRLs, required", base, true, attest.CheckCollateral, "CRLs are required"},
		{"only the PCK CA's, required", with(pckCRL, nil), true, attest.CheckCollateral, "CRLs are required"},
		{"both, nothing revoked", with(pckCRL, rootCRL), true, "", ""},
		{"PEM and hex, as PCS and PCCS serve them", with(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: pckCRL}), []byte(hex.EncodeToString(rootCRL))), true, "", ""},
		{"the PCK certificate revoked", with(makeCRL(t, pck.ca, pck.caKey, this, next, big.NewInt(5), pck.leaf.SerialNumber), rootCRL), true,
			attest.CheckRevoked, `"Intel SGX PCK Certificate" (serial 7f8939) is revoked by the PCK CA's CRL`},
		{"the PCK CA revoked", with(pckCRL, makeCRL(t, s.root, s.rootKey, this, next, pck.ca.SerialNumber)), true,
			attest.CheckRevoked, `"Intel SGX PCK Platform CA" (serial 956f5d) is revoked by the root CA's CRL`},
		{"the TCB signing certificate revoked", with(pckCRL, makeCRL(t, s.root, s.rootKey, this, next, s.signing.SerialNumber)), true,
			attest.CheckRevoked, `"test TCB signing"`},
		{"a PCK CRL signed by another key", with(makeCRL(t, pck.ca, otherKey, this, next), rootCRL), true, attest.CheckCollateral, "signature does not verify"},
		{"the root's CRL given as the PCK CA's", with(rootCRL, rootCRL), true, attest.CheckCollateral, `issued by "test root (fuzzing only)", want "Intel SGX PCK Platform CA"`},
		{"a stale PCK CRL", with(makeCRL(t, pck.ca, pck.caKey, this.Add(-month), this), rootCRL), true, attest.CheckValidity, "PCK CA's CRL's next update was"},
		// Historical evidence is judged by a later list.
		{"a CRL issued after the verification time", with(makeCRL(t, pck.ca, pck.caKey, fuzzAt.Add(time.Hour), next), rootCRL), true, "", ""},
		{"not a CRL", with([]byte("junk"), rootCRL), true, attest.CheckCollateral, "PCK CA's CRL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Judge(p, tc.c, fuzzAt, s.root, tc.require)
			if tc.check == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(tc.c.PCKCRL) > 0 && !v.NotAfter.Equal(next) {
					t.Errorf("verdict valid until %s, want the CRLs' next update %s", v.NotAfter, next)
				}
				return
			}
			if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("got %v, want %s (%q)", err, tc.check, tc.reason)
			}
		})
	}
}
