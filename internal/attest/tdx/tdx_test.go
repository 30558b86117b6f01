package tdx

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	tdxtestdata "github.com/google/go-tdx-guest/testing/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

var vectorTime = time.Unix(1725263032, 0)

func load(t testing.TB) ([]byte, intelpcs.Collateral) {
	t.Helper()
	read := func(name string) []byte { return attesttest.Read(t, "tdx/"+name) }
	return read("quote_v4_tdx_ecdsa_p256.bin"), intelpcs.Collateral{
		TCBInfo:      read("tcb_info_v3_tdx_fmspc_C0806F000000.json"),
		QEIdentity:   read("qe_identity_v2_tdx2.json"),
		SigningChain: read("tcb_signing_chain_certs.pem"),
	}
}

func TestRealQuote(t *testing.T) {
	raw, col := load(t)
	c, err := Verify(raw, Options{Collateral: col, At: vectorTime})
	t.Logf("claims: MRTD %s RTMR0 %s debug %v TCB %q; err %v", c.TDX.MRTD, c.TDX.RTMR[0], c.Debug, c.TCBStatus, err)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != attest.TDX || len(c.TDX.MRTD) != 48 || c.TDX.MRTD.String()[:8] != "91eb2b44" || c.TCBStatus != attest.TCBUpToDate {
		t.Errorf("claims %+v", c)
	}
	if c.NotBefore.After(vectorTime) || c.NotAfter.Before(vectorTime) || c.NotAfter.After(time.Date(2024, 10, 2, 7, 25, 12, 0, time.UTC)) {
		t.Errorf("validity %s..%s: want the vector's time inside, ending no later than the TCB info's next update", c.NotBefore, c.NotAfter)
	}
}

func TestRejections(t *testing.T) {
	raw, col := load(t)
	// Verified once first, so every refusal below holds with the chains
	// and collateral remembered as verified.
	if _, err := Verify(raw, Options{Collateral: col, At: vectorTime}); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { c := bytes.Clone(raw); c[i] ^= 1; return c }
	foreign := attesttest.ForeignRoot(t)
	sgxCol := intelpcs.Collateral{
		TCBInfo:      attesttest.Read(t, "sgx-dcap/tcb_info_v3_fmspc_00606A000000.json"),
		QEIdentity:   col.QEIdentity,
		SigningChain: col.SigningChain,
	}
	sgxQE := col
	sgxQE.QEIdentity = attesttest.Read(t, "sgx-dcap/qe_identity_v2.json")
	const sigStart = 48 + 584 + 4 // header, TD report body, signature data length
	for _, tc := range []struct {
		name   string
		raw    []byte
		col    intelpcs.Collateral
		at     time.Time
		root   *x509.Certificate
		check  attest.Check
		reason string
	}{
		{"flipped byte in the TD report", flip(200), col, vectorTime, nil, attest.CheckSignature, ""},
		{"flipped byte in the quote signature", flip(sigStart + 3), col, vectorTime, nil, attest.CheckSignature, ""},
		{"flipped byte in the QE report", flip(sigStart + 64 + 64 + 6 + 100), col, vectorTime, nil, attest.CheckSignature, "QE report signature"},
		{"PCK chain before its validity", raw, col, time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC), nil, attest.CheckValidity, "PCK certificate chain"},
		{"PCK chain after its expiry", raw, col, time.Date(2060, 1, 1, 0, 0, 0, 0, time.UTC), nil, attest.CheckValidity, "PCK certificate chain"},
		{"TCB info issued after the verification time", raw, col, time.Date(2024, 9, 2, 7, 20, 0, 0, time.UTC), nil, attest.CheckValidity, "TCB info is issued 2024-09-02T07:25:12Z"},
		{"foreign root", raw, col, vectorTime, foreign, attest.CheckChain, "does not chain to the Foreign Root"},
		{"SGX TCB info for a TD", raw, sgxCol, vectorTime, nil, attest.CheckCollateral, "the TCB info is for SGX, the quote is TDX"},
		{"SGX QE identity for a TD", raw, sgxQE, vectorTime, nil, attest.CheckCollateral, "the QE identity is QE's"},
		{"collateral past its next update", raw, col, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), nil, attest.CheckValidity, ""},
		{"no collateral", raw, intelpcs.Collateral{}, vectorTime, nil, attest.CheckCollateral, "--collateral"},
		{"non-zero bytes after the quote", append(bytes.Clone(raw), 0, 1), col, vectorTime, nil, attest.CheckFormat, "2 bytes after the quote's signature data, not all zero"},
		{"a signature data size past the end", withU32(raw, 48+584, 1<<20), col, vectorTime, nil, attest.CheckFormat, "signature data size"},
		{"a v5 body type that is no TD report", v5Body(t, raw, 1, 584), col, vectorTime, nil, attest.CheckFormat, "body type 1"},
		{"a v5 body size that is not its type's", v5Body(t, raw, 2, 648), col, vectorTime, nil, attest.CheckFormat, "body size 648"},
		{"truncated", raw[:300], col, vectorTime, nil, attest.CheckFormat, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.raw, Options{Collateral: tc.col, At: tc.at, Root: tc.root})
			if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("got %v, want %s (%q)", err, tc.check, tc.reason)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	raw, col := load(f)
	f.Add(raw)
	v5, _ := real(f, "dcap-qvl-v5", "quote.bin")
	f.Add(v5)
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		_, err := Verify(raw, Options{Collateral: col, At: vectorTime})
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("unnamed rejection: %v", err)
		}
	})
}

// go-tdx-guest's own production quote and sample PCS responses (signed by
// Intel's TCB signing chain, the same as in the shared vectors) pass the
// PCK chain and collateral checks and are refused at the TCB status: the
// sample TCB info has no level for the quote's TCB. The TD's identity is
// readable with the rejection.
func TestGoTDXGuestVector(t *testing.T) {
	_, col := load(t)
	col.TCBInfo, col.QEIdentity = tdxtestdata.TcbInfoBody, tdxtestdata.QeIdentityBody
	at := time.Date(2023, 7, 1, 1, 0, 0, 0, time.UTC)
	// The sample carries a marked test suffix after the quote: refused as
	// trailing bytes, and verified without it.
	suffix := []byte("\nextra bytes(only for testing purpose)\n")
	if _, err := Verify(tdxtestdata.RawQuote, Options{Collateral: col, At: at}); attest.CheckOf(err) != attest.CheckFormat {
		t.Errorf("with the suffix: %v, want trailing bytes refused", err)
	}
	quote, ok := bytes.CutSuffix(tdxtestdata.RawQuote, suffix)
	if !ok {
		t.Fatal("the sample quote's test suffix changed")
	}
	c, err := Verify(quote, Options{Collateral: col, At: at})
	if attest.CheckOf(err) != attest.CheckTCB || c == nil || len(c.TDX.MRTD) != 48 {
		t.Fatalf("got %v (claims %+v), want a tcb-status rejection", err, c)
	}
	t.Logf("MRTD %s: %v", c.TDX.MRTD, err)
}
