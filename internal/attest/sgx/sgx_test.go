package sgx

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	tdxtestdata "github.com/google/go-tdx-guest/testing/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

var vectorTime = time.Unix(1671497404, 0)

func load(t testing.TB) ([]byte, Collateral) {
	t.Helper()
	read := func(name string) []byte { return attesttest.Read(t, "sgx-dcap/"+name) }
	return read("quote_v3_ecdsa_p256_pck_chain.bin"), Collateral{
		TCBInfo:      read("tcb_info_v3_fmspc_00606A000000.json"),
		QEIdentity:   read("qe_identity_v2.json"),
		SigningChain: read("tcb_info_v3_fmspc_00606A000000_certs.pem"),
	}
}

func TestRealQuoteVerifies(t *testing.T) {
	raw, col := load(t)
	c, err := Verify(raw, Options{Collateral: col, At: vectorTime})
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != attest.SGX || c.SGX.MRENCLAVE.String()[:8] != "68823bc6" || c.Insecure {
		t.Errorf("claims %+v", c)
	}
	if c.NotBefore.After(vectorTime) || c.NotAfter.Before(vectorTime) {
		t.Errorf("validity %s..%s does not hold the vector's time", c.NotBefore, c.NotAfter)
	}
	// The report body's ATTRIBUTES (offset 48) of a 64-bit release
	// enclave: MODE64BIT set, DEBUG clear, XFRM with x87 and SSE.
	if a := c.SGX.Attributes; len(a) != 16 || a[0]&0x06 != 0x04 || a[8]&0x03 != 0x03 {
		t.Errorf("attributes %x", []byte(a))
	}
	t.Logf("MRENCLAVE %s MRSIGNER %s ISVPRODID %d ISVSVN %d debug %v TCB %s valid %s..%s",
		c.SGX.MRENCLAVE, c.SGX.MRSIGNER, c.SGX.ISVProdID, c.SGX.ISVSVN, c.Debug, c.TCBStatus, c.NotBefore, c.NotAfter)
}

func TestRejections(t *testing.T) {
	raw, col := load(t)
	// Verified once first, so every refusal below holds with the chains
	// and collateral remembered as verified.
	if _, err := Verify(raw, Options{Collateral: col, At: vectorTime}); err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 0x01; return c }
	sigStart := sigDataStart
	foreign := attesttest.ForeignRoot(t)
	tamperTCB := bytes.Replace(col.TCBInfo, []byte(`"pcesvn":13`), []byte(`"pcesvn":12`), 1)
	if bytes.Equal(tamperTCB, col.TCBInfo) {
		t.Fatal("TCB info has no pcesvn 13 to tamper with")
	}
	for _, tc := range []struct {
		name   string
		raw    []byte
		col    func(Collateral) Collateral
		at     time.Time
		root   *x509.Certificate
		check  attest.Check
		reason string
	}{
		{"flipped byte in the report body", flip(raw, headerLen+64), nil, vectorTime, nil, attest.CheckSignature, "quote signature"},
		{"flipped byte in the quote signature", flip(raw, sigStart+3), nil, vectorTime, nil, attest.CheckSignature, "quote signature"},
		{"flipped byte in the QE report", flip(raw, sigStart+128+100), nil, vectorTime, nil, attest.CheckSignature, "QE report signature"},
		{"chain after expiry", raw, nil, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), nil, attest.CheckValidity, "PCK certificate chain"},
		{"chain before validity", raw, nil, time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC), nil, attest.CheckValidity, "is valid from"},
		{"collateral issued in the future", raw, nil, time.Date(2022, 12, 19, 9, 0, 0, 0, time.UTC), nil, attest.CheckValidity, "TCB info is issued 2022-12-19T09:40:10Z"},
		{"collateral past its next update", raw, nil, time.Date(2023, 1, 16, 0, 0, 0, 0, time.UTC), nil, attest.CheckValidity, "QE identity is issued"},
		{"foreign root", raw, nil, vectorTime, foreign, attest.CheckChain, "does not chain to the Foreign Root"},
		{"tampered TCB info", raw, func(c Collateral) Collateral { c.TCBInfo = tamperTCB; return c }, vectorTime, nil, attest.CheckCollateral, "TCB info signature"},
		{"TCB info of another platform", raw, func(c Collateral) Collateral { c.TCBInfo = c.QEIdentity; return c }, vectorTime, nil, attest.CheckCollateral, "want the fields \"tcbInfo\""},
		{"no collateral", raw, func(Collateral) Collateral { return Collateral{} }, vectorTime, nil, attest.CheckCollateral, "--collateral"},
		{"trailing bytes", append(bytes.Clone(raw), 0), nil, vectorTime, nil, attest.CheckFormat, "1 trailing bytes"},
		{"truncated", raw[:len(raw)-10], nil, vectorTime, nil, attest.CheckFormat, "truncated"},
		{"truncated header", raw[:100], nil, vectorTime, nil, attest.CheckFormat, "truncated quote: 100 bytes"},
		{"not a v3 quote", flip(raw, 0), nil, vectorTime, nil, attest.CheckFormat, "quote version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := col
			if tc.col != nil {
				c = tc.col(col)
			}
			_, err := Verify(tc.raw, Options{Collateral: c, At: tc.at, Root: tc.root})
			if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("got %v, want %s (%q)", err, tc.check, tc.reason)
			}
		})
	}
}

// The real quote's platform needs SW hardening: the default policy
// (UpToDate only) refuses it by name, a policy accepting it takes it.
func TestRealQuoteUnderPolicies(t *testing.T) {
	raw, col := load(t)
	c, err := Verify(raw, Options{Collateral: col, At: vectorTime})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&attest.Policy{}).Check(c); attest.CheckOf(err) != attest.CheckTCB {
		t.Errorf("default policy: %v, want a tcb-status rejection", err)
	}
	p := attest.Policy{AcceptTCB: []string{attest.TCBUpToDate, attest.TCBSWHardeningNeeded},
		Identities: []attest.Identity{{Type: attest.SGX, MRENCLAVE: c.SGX.MRENCLAVE}}}
	if err := p.Check(c); err != nil {
		t.Errorf("accepting policy: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	raw, col := load(f)
	f.Add(raw)
	f.Add(make([]byte, sigDataStart))
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		_, err := Verify(raw, Options{Collateral: col, At: vectorTime})
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("unnamed rejection: %v", err)
		}
	})
}

// Intel's own CRLs (of the PCK Platform CA, June 2023, and of the root CA,
// April 2023; go-tdx-guest's test data) apply to the real quote's chain:
// nothing of it is revoked. A later list judges earlier evidence.
func TestRealQuoteWithIntelsCRLs(t *testing.T) {
	raw, col := load(t)
	col.PCKCRL, col.RootCRL = tdxtestdata.PckCrlBody, tdxtestdata.RootCrlBody
	if _, err := Verify(raw, Options{Collateral: col, At: vectorTime, RequireCRLs: true}); err != nil {
		t.Fatal(err)
	}
	bad := col
	bad.PCKCRL = bytes.Clone(col.PCKCRL)
	bad.PCKCRL[len(bad.PCKCRL)-5] ^= 1 // in the signature
	if _, err := Verify(raw, Options{Collateral: bad, At: vectorTime, RequireCRLs: true}); attest.CheckOf(err) != attest.CheckCollateral {
		t.Errorf("a tampered PCK CRL: %v, want a collateral rejection", err)
	}
	none := col
	none.PCKCRL, none.RootCRL = nil, nil
	if _, err := Verify(raw, Options{Collateral: none, At: vectorTime, RequireCRLs: true}); attest.CheckOf(err) != attest.CheckCollateral {
		t.Errorf("no CRLs where they are required: %v, want a collateral rejection", err)
	}
}

// Zero padding after a quote's declared length is cut; anything else
// there, or a length beyond the buffer, is refused.
func TestTrimQuote(t *testing.T) {
	q := make([]byte, sigDataStart+10)
	binary.LittleEndian.PutUint32(q[signedLen:], 10)
	padded := append(append([]byte(nil), q...), 0, 0, 0)
	if got, err := TrimQuote(padded); err != nil || len(got) != len(q) {
		t.Errorf("padded: %d %v", len(got), err)
	}
	if _, err := TrimQuote(append(padded, 1)); err == nil {
		t.Error("non-zero after the quote accepted")
	}
	binary.LittleEndian.PutUint32(q[signedLen:], 11)
	if _, err := TrimQuote(q); err == nil {
		t.Error("a quote longer than its buffer accepted")
	}
	if _, err := TrimQuote(q[:100]); err == nil {
		t.Error("a short buffer accepted")
	}
	raw, _ := load(t)
	if got, err := TrimQuote(append(append([]byte(nil), raw...), make([]byte, 64)...)); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("the real quote, padded: %v", err)
	}
}
