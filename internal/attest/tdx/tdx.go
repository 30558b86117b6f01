// Package tdx verifies Intel TDX quotes (v4) offline with go-tdx-guest:
// the caller's Intel PCS collateral is served to it from memory, never
// fetched, and the verification time is the caller's.
package tdx

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/abi"
	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/verify"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
)

// Options of a verification.
type Options struct {
	// Collateral is Intel PCS data, as for SGX.
	Collateral sgx.Collateral
	At         time.Time
}

// tdAttributeDebug is bit 0 of TD attributes.
const tdAttributeDebug = 0x01

// Verify checks a v4 quote and returns its claims (with those read so far
// on a rejection). go-tdx-guest accepts only TCB status UpToDate, so any
// other status is a tcb-status rejection here whatever the policy says.
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("tdx: a verification time is required")
	}
	q, err := abi.QuoteToProto(raw)
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote: %v", err)
	}
	quote, ok := q.(*pb.QuoteV4)
	if !ok {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote is %T, want a v4 quote", q)
	}
	if n := len(quote.GetExtraBytes()); n > 0 {
		return nil, attest.Reject(attest.CheckFormat, "%d trailing bytes after the quote", n)
	}
	body := quote.GetTdQuoteBody()
	claims := &attest.Claims{
		Type:       attest.TDX,
		Debug:      len(body.GetTdAttributes()) > 0 && body.GetTdAttributes()[0]&tdAttributeDebug != 0,
		ReportData: body.GetReportData(),
		TDX:        &attest.TDXIdentity{MRTD: body.GetMrTd(), MRSEAM: body.GetMrSeam(), TDAttributes: body.GetTdAttributes()},
	}
	for i, r := range body.GetRtmrs() {
		if i < len(claims.TDX.RTMR) {
			claims.TDX.RTMR[i] = r
		}
	}
	c := opts.Collateral
	if len(c.TCBInfo) == 0 || len(c.QEIdentity) == 0 || len(c.SigningChain) == 0 {
		return claims, attest.Reject(attest.CheckCollateral, "TCB info, QE identity and their signing chain are required (--collateral DIR)")
	}
	chain := []string{url.QueryEscape(string(c.SigningChain))}
	getter := collateralGetter{
		"tcb": {header: map[string][]string{"Tcb-Info-Issuer-Chain": chain}, body: c.TCBInfo},
		"qe":  {header: map[string][]string{"Sgx-Enclave-Identity-Issuer-Chain": chain}, body: c.QEIdentity},
	}
	roots := x509.NewCertPool()
	roots.AddCert(sgx.Root()) // TDX chains to the same pinned Intel root
	err = verify.TdxQuote(quote, &verify.Options{GetCollateral: true, Getter: getter, Now: opts.At, TrustedRoots: roots})
	if err != nil {
		return claims, classify(err)
	}
	claims.TCBStatus = attest.TCBUpToDate
	return claims, nil
}

type response struct {
	header map[string][]string
	body   []byte
}

// collateralGetter answers go-tdx-guest's PCS requests from memory.
type collateralGetter map[string]response

func (g collateralGetter) Get(u string) (map[string][]string, []byte, error) {
	switch {
	case strings.Contains(u, "/tcb"):
		return g["tcb"].header, g["tcb"].body, nil
	case strings.Contains(u, "/qe/identity"):
		return g["qe"].header, g["qe"].body, nil
	}
	return nil, nil, fmt.Errorf("offline verification: %s is not among the collateral given", u)
}

var tcbStatus = regexp.MustCompile(`TCB Status is not "UpToDate", found "(\w+)"`)

// classify names the check go-tdx-guest's error failed.
func classify(err error) error {
	msg := err.Error()
	switch {
	case tcbStatus.MatchString(msg):
		return &attest.Rejection{Check: attest.CheckTCB, Reason: fmt.Sprintf("TCB status %q (this verifier accepts UpToDate only)", tcbStatus.FindStringSubmatch(msg)[1]), Err: err}
	case strings.Contains(msg, "no matching TCB level"):
		return &attest.Rejection{Check: attest.CheckTCB, Reason: "the platform's TCB is below every TCB level of the TCB info: " + msg, Err: err}
	case strings.Contains(msg, "expired") || strings.Contains(msg, "not yet valid") || strings.Contains(msg, "current time"):
		return &attest.Rejection{Check: attest.CheckValidity, Reason: msg, Err: err}
	case strings.Contains(msg, "tcbInfo") || strings.Contains(msg, "QeIdentity") || strings.Contains(msg, "collateral"):
		return &attest.Rejection{Check: attest.CheckCollateral, Reason: msg, Err: err}
	case strings.Contains(msg, "signature") || strings.Contains(msg, "verify"):
		return &attest.Rejection{Check: attest.CheckSignature, Reason: msg, Err: err}
	default:
		return &attest.Rejection{Check: attest.CheckChain, Reason: msg, Err: err}
	}
}
