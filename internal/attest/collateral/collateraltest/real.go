package collateraltest

import (
	"bytes"
	"net/url"
	"testing"
	"time"

	tdxtesting "github.com/google/go-tdx-guest/testing"
	tdxtestdata "github.com/google/go-tdx-guest/testing/testdata"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// RealQuote is a real quote with the time at which its collateral, as
// RealPCS serves it, is current.
type RealQuote struct {
	Raw []byte
	At  time.Time
}

// RealQuotes are real SGX (Platform CA, FMSPC 00606A000000) and TDX (FMSPC
// 50806F000000) quotes whose collateral, with Intel's CRLs, RealPCS serves.
func RealQuotes(tb testing.TB) (sgx, tdx RealQuote) {
	tb.Helper()
	sgx = RealQuote{Raw: attesttest.Read(tb, "sgx-dcap/quote_v3_ecdsa_p256_pck_chain.bin"), At: time.Unix(1671497404, 0)}
	// go-tdx-guest's sample carries a marked test suffix after the quote.
	raw, ok := bytes.CutSuffix(tdxtestdata.RawQuote, []byte("\nextra bytes(only for testing purpose)\n"))
	if !ok {
		tb.Fatal("go-tdx-guest's sample quote's test suffix changed")
	}
	return sgx, RealQuote{Raw: raw, At: time.Date(2023, 7, 1, 1, 0, 0, 0, time.UTC)}
}

// RealPCS is a fake Intel PCS serving real, Intel-signed collateral: the
// SGX TCB info and QE identity of the oasis-core vectors, the TDX ones of
// go-tdx-guest's (with the issuer chain its sample headers carry), and
// Intel's PCK Platform CA and root CA CRLs (June and April 2023).
func RealPCS(tb testing.TB) *PCS {
	tb.Helper()
	chain, err := url.PathUnescape(tdxtesting.TcbInfoHeader["Tcb-Info-Issuer-Chain"][0])
	if err != nil {
		tb.Fatal(err)
	}
	read := func(name string) []byte { return attesttest.Read(tb, "sgx-dcap/"+name) }
	return NewPCS(tb, map[string]*Intel{
		"sgx": {
			TCBInfo:    map[string][]byte{"00606a000000": read("tcb_info_v3_fmspc_00606A000000.json")},
			QEIdentity: read("qe_identity_v2.json"),
			Chain:      read("tcb_info_v3_fmspc_00606A000000_certs.pem"),
		},
		"tdx": {
			TCBInfo:    map[string][]byte{"50806f000000": tdxtestdata.TcbInfoBody},
			QEIdentity: tdxtestdata.QeIdentityBody,
			Chain:      []byte(chain),
		},
	}, map[string][]byte{"platform": tdxtestdata.PckCrlBody, "root": tdxtestdata.RootCrlBody})
}
