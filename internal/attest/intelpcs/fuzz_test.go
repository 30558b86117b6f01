package intelpcs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tdx-guest/pcs"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// testSigner is a stand-in for Intel's TCB signing chain: a root and a
// leaf whose key signs the collateral, so the fuzzer reaches the parsing
// behind the signature check. Trusted only here.
type testSigner struct {
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
	signing *x509.Certificate // the TCB signing certificate
	chain   []byte
	key     *ecdsa.PrivateKey
}

func newTestSigner(tb testing.TB) *testSigner {
	tb.Helper()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	from, to := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root (fuzzing only)"},
		NotBefore: from, NotAfter: to, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		tb.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test TCB signing"},
		NotBefore: from, NotAfter: to, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, root, &leafKey.PublicKey, rootKey)
	if err != nil {
		tb.Fatal(err)
	}
	signing, _ := x509.ParseCertificate(leafDER)
	return &testSigner{root: root, rootKey: rootKey, signing: signing, key: leafKey, chain: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})}
}

// envelope signs body as Intel does (raw r||s over SHA-256 of the field's
// exact bytes).
func (s *testSigner) envelope(field string, body []byte) []byte {
	d := sha256.Sum256(body)
	r, sv, err := ecdsa.Sign(rand.Reader, s.key, d[:])
	if err != nil {
		panic(err)
	}
	rs := make([]byte, 64)
	r.FillBytes(rs[:32])
	sv.FillBytes(rs[32:])
	return []byte(`{"` + field + `":` + string(body) + `,"signature":"` + hex.EncodeToString(rs) + `"}`)
}

var (
	fuzzAt       = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	fuzzPlatform = Platform{
		PCK: &pcs.PckExtensions{FMSPC: "00906ed50000", TCB: pcs.PckCertTCB{CPUSvnComponents: make([]byte, 16), PCESvn: 11}},
		QE:  make(Report, ReportLen),
	}
	zeros16 = `[` + strings.TrimSuffix(strings.Repeat(`{"svn":0},`, 16), ",") + `]`
	// A TCB info and QE identity the platform above is UpToDate by.
	seedTCBInfo = `{"id":"SGX","version":3,"issueDate":"2026-01-01T00:00:00Z","nextUpdate":"2026-12-01T00:00:00Z","fmspc":"00906ED50000",` +
		`"tcbLevels":[{"tcb":{"sgxtcbcomponents":` + zeros16 + `,"pcesvn":11},"tcbStatus":"UpToDate"},` +
		`{"tcb":{"sgxtcbcomponents":` + zeros16 + `,"pcesvn":5},"tcbStatus":"OutOfDate"}]}`
	seedQEIdentity = `{"id":"QE","issueDate":"2026-01-01T00:00:00Z","nextUpdate":"2026-12-01T00:00:00Z","miscselect":"00000000","miscselectMask":"FFFFFFFF",` +
		`"attributes":"` + strings.Repeat("0", 32) + `","attributesMask":"` + strings.Repeat("F", 32) + `","mrsigner":"` + strings.Repeat("0", 64) + `",` +
		`"isvprodid":0,"tcbLevels":[{"tcb":{"isvsvn":0},"tcbStatus":"UpToDate"}]}`
)

// The fuzz target's seed is collateral that verifies: the fuzzer starts
// from the paths a real verdict takes.
func TestFuzzSeedVerifies(t *testing.T) {
	s := newTestSigner(t)
	v, err := Judge(fuzzPlatform, Collateral{TCBInfo: s.envelope("tcbInfo", []byte(seedTCBInfo)),
		QEIdentity: s.envelope("enclaveIdentity", []byte(seedQEIdentity)), SigningChain: s.chain}, fuzzAt, s.root, false)
	if err != nil || v.Status != attest.TCBUpToDate {
		t.Fatalf("seed collateral: %+v %v", v, err)
	}
}

// FuzzCollateral feeds TCB info and QE identity bodies, signed so that
// they get past the signature, to the verdict: whatever they hold, the
// answer is a verdict with a status or a named rejection, never a panic.
func FuzzCollateral(f *testing.F) {
	s := newTestSigner(f)
	f.Add([]byte(seedTCBInfo), []byte(seedQEIdentity))
	f.Add([]byte(`{"id":"TDX","version":3,"fmspc":"00906ed50000","tcbLevels":[{"tcb":{"sgxtcbcomponents":[]}}]}`), []byte(`{"tcbLevels":[]}`))
	f.Add([]byte(`null`), []byte(`[]`))
	f.Fuzz(func(t *testing.T, info, qe []byte) {
		attesttest.CountExec()
		c := Collateral{TCBInfo: s.envelope("tcbInfo", info), QEIdentity: s.envelope("enclaveIdentity", qe), SigningChain: s.chain}
		v, err := Judge(fuzzPlatform, c, fuzzAt, s.root, false)
		if err == nil && (v == nil || v.Status == "") {
			t.Fatalf("a verdict without a status: %+v", v)
		}
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("not a named rejection: %v", err)
		}
	})
}
