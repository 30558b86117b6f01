package tdx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tdx-guest/abi"
	pb "github.com/google/go-tdx-guest/proto/tdx"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// real reads a folder of real evidence in testdata (its provenance
// there): a quote and its collateral.
func real(t testing.TB, dir, quote string) ([]byte, intelpcs.Collateral) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return read(quote), intelpcs.Collateral{
		TCBInfo: read("tcb_info.json"), QEIdentity: read("qe_identity.json"), SigningChain: read("tcb_signing_certs.pem"),
		PCKCRL: read("pck_crl.der"), RootCRL: read("root_ca_crl.der"),
	}
}

var v5Time = time.Date(2026, 2, 19, 0, 0, 0, 0, time.UTC)

// The TDX quote v5 (a TD 1.5 report) of dcap-qvl's samples: its TD 1.5
// fields are read and its verdict is dcap-qvl's, no TCB level for the
// platform (the PCK's CPUSVN byte 8 is 3, every level wants 5).
func TestQuoteV5(t *testing.T) {
	raw, col := real(t, "dcap-qvl-v5", "quote.bin")
	c, err := Verify(raw, Options{Collateral: col, At: v5Time, RequireCRLs: true})
	if attest.CheckOf(err) != attest.CheckTCB || !strings.Contains(err.Error(), "below every TCB level of FMSPC 90C06F000000") {
		t.Errorf("verdict %v, want dcap-qvl's: no TCB level matches", err)
	}
	if c == nil || c.TDX.TEETCBSVN.String() != "07010300000000000000000000000000" || c.TDX.TEETCBSVN2.String() != "0d010300000000000000000000000000" ||
		len(c.TDX.MRServiceTD) != 48 || len(c.TDX.MRTD) != 48 {
		t.Fatalf("claims %+v", c.TDX)
	}
	t.Logf("MRTD %s TEE_TCB_SVN %s TEE_TCB_SVN2 %s MRSERVICETD %s: %v", c.TDX.MRTD, c.TDX.TEETCBSVN, c.TDX.TEETCBSVN2, c.TDX.MRServiceTD, err)
	// Every TD 1.5 field is signed: a change is refused by the signature,
	// before any collateral is read.
	for name, off := range map[string]int{"TEE_TCB_SVN2": 54 + 584, "MRSERVICETD": 54 + 600 + 47} {
		tampered := bytes.Clone(raw)
		tampered[off] ^= 1
		if _, err := Verify(tampered, Options{Collateral: col, At: v5Time}); attest.CheckOf(err) != attest.CheckSignature {
			t.Errorf("%s changed: %v, want refused by the signature", name, err)
		}
	}
}

// A v4 quote in a fixed-size buffer (its 4936 bytes, then 70 zero bytes)
// verifies, and the producer's reading of it is the quote alone.
func TestZeroPaddedQuote(t *testing.T) {
	raw, col := real(t, "dcap-qvl-v4", "quote-5006-bytes.bin")
	at := time.Date(2025, 6, 20, 0, 0, 0, 0, time.UTC)
	c, err := Verify(raw, Options{Collateral: col, At: at, RequireCRLs: true})
	if err != nil || c.TCBStatus != attest.TCBUpToDate || c.TDX.TEETCBSVN2 != nil || c.TDX.MRServiceTD != nil {
		t.Fatalf("%v %+v", err, c)
	}
	quote, rd, err := ReportData(raw)
	if err != nil || len(quote) != 4936 || !bytes.Equal(rd, c.ReportData) {
		t.Errorf("ReportData: %d bytes, %v", len(quote), err)
	}
	if _, err := Verify(append(bytes.Clone(raw), 0x20), Options{Collateral: col, At: at}); attest.CheckOf(err) != attest.CheckFormat {
		t.Errorf("a non-zero byte in the padding: %v", err)
	}
}

// withU32 is raw with a little-endian u32 written at off.
func withU32(raw []byte, off int, v uint32) []byte {
	out := bytes.Clone(raw)
	binary.LittleEndian.PutUint32(out[off:], v)
	return out
}

// v5Body rewrites a v4 quote as v5 with the body descriptor given.
func v5Body(t testing.TB, v4 []byte, typ uint16, size uint32) []byte {
	t.Helper()
	out := append([]byte(nil), v4[:48]...)
	binary.LittleEndian.PutUint16(out, 5)
	out = binary.LittleEndian.AppendUint16(out, typ)
	out = binary.LittleEndian.AppendUint32(out, size)
	return append(out, v4[48:]...)
}

// Every v4 quote go-tdx-guest reads, this parser reads alike, and the
// reverse (v4 is unchanged by the v5 parser).
func TestQuoteV4AsGoTDXGuest(t *testing.T) {
	raw, _ := load(t)
	padded, _ := real(t, "dcap-qvl-v4", "quote-5006-bytes.bin")
	quote, _, err := ReportData(padded)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range [][]byte{raw, quote} {
		sameAsGoTDXGuest(t, q)
	}
}

func sameAsGoTDXGuest(t *testing.T, raw []byte) {
	t.Helper()
	mine, err := parseQuote(raw)
	var theirs *pb.QuoteV4
	if p, perr := quoteToProto(raw); perr == nil {
		if v4, ok := p.(*pb.QuoteV4); ok && len(v4.GetExtraBytes()) == 0 && abi.CheckQuoteV4(v4) == nil {
			theirs = v4
		}
	}
	switch {
	case mine != nil && mine.Version == 5:
		return // go-tdx-guest v0.3.1 reads no v5
	case (err == nil) != (theirs != nil):
		t.Fatalf("this parser: %v; go-tdx-guest took it: %v", err, theirs != nil)
	case err != nil:
		return
	}
	body := theirs.GetTdQuoteBody()
	cert := theirs.GetSignedData().GetCertificationData().GetQeReportCertificationData()
	for name, pair := range map[string][2][]byte{
		"MRTD": {mine.MRTD(), body.GetMrTd()}, "RTMR3": {mine.RTMR(3), body.GetRtmrs()[3]}, "report data": {mine.ReportData(), body.GetReportData()},
		"TEE_TCB_SVN": {mine.TEETCBSVN(), body.GetTeeTcbSvn()}, "MRSIGNERSEAM": {mine.MRSIGNERSEAM(), body.GetMrSignerSeam()},
		"signature": {mine.Signed.Sig, theirs.GetSignedData().GetSignature()}, "QE signature": {mine.Signed.QESig, cert.GetQeReportSignature()},
		"QE auth": {mine.Signed.QEAuth, cert.GetQeAuthData().GetData()}, "PCK chain": {mine.Signed.PCKChain, cert.GetPckCertificateChainData().GetPckCertChain()},
	} {
		if !bytes.Equal(pair[0], pair[1]) {
			t.Errorf("%s: %x, go-tdx-guest %x", name, pair[0], pair[1])
		}
	}
}

// The parser never panics, reads v4 as go-tdx-guest does, and every
// refusal is named.
func FuzzParseQuote(f *testing.F) {
	raw, _ := load(f)
	f.Add(raw)
	v5, _ := real(f, "dcap-qvl-v5", "quote.bin")
	f.Add(v5)
	f.Add(v5Body(f, raw, 3, 648))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, err := parseQuote(raw)
		if err != nil && attest.CheckOf(err) != attest.CheckFormat {
			t.Fatalf("unnamed refusal: %v", err)
		}
		sameAsGoTDXGuest(t, raw)
	})
}

// quoteToProto is go-tdx-guest's abi.QuoteToProto with its panic (v0.3.1
// slices by a length field before checking it, google/go-tdx-guest pull
// 104) made an error.
func quoteToProto(raw []byte) (q any, err error) {
	defer func() {
		if r := recover(); r != nil {
			q, err = nil, fmt.Errorf("go-tdx-guest panicked: %v", r)
		}
	}()
	return abi.QuoteToProto(raw)
}
