// Package tdx verifies Intel TDX quotes (v4, and v5 with a TD 1.0 or TD
// 1.5 report) offline: it parses the quote and checks its layout (quote.go;
// go-tdx-guest v0.3.1 reads v4 only); intelpcs checks its signatures, the QE
// report's binding of the attestation key and the PCK chain to the pinned
// Intel root as for SGX (chains once, so a quote costs its signatures), and
// judges the caller's Intel PCS collateral, so every TCB status Intel
// defines is reported for the policy to accept or refuse.
package tdx

import (
	"crypto/x509"
	"errors"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// Options of a verification.
type Options struct {
	// Collateral is Intel PCS data, as for SGX.
	Collateral intelpcs.Collateral
	At         time.Time
	// Root replaces the Intel root (tests of foreign roots); nil: Intel's.
	Root *x509.Certificate
	// Source, when set, gives the collateral for the quote's platform
	// instead of Collateral.
	Source intelpcs.Source
	// RequireCRLs refuses collateral without the PCK CA's and root CA's
	// CRLs.
	RequireCRLs bool
}

// tdAttributeDebug is bit 0 of TD attributes.
const tdAttributeDebug = 0x01

// Verify checks a v4 or v5 quote and returns its claims (with those read
// so far on a rejection).
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("tdx: a verification time is required")
	}
	root := opts.Root
	if root == nil {
		root = intelpcs.Root()
	}
	q, err := parseQuote(raw)
	if err != nil {
		return nil, err
	}
	claims := &attest.Claims{
		Type:       attest.TDX,
		Debug:      q.TDAttributes()[0]&tdAttributeDebug != 0,
		ReportData: q.ReportData(),
		TDX: &attest.TDXIdentity{
			MRTD: q.MRTD(), MRSEAM: q.MRSEAM(), MRCONFIGID: q.MRCONFIGID(), TDAttributes: q.TDAttributes(),
			TEETCBSVN: q.TEETCBSVN(), TEETCBSVN2: q.TEETCBSVN2(), MRServiceTD: q.MRSERVICETD(),
		},
	}
	for i := range claims.TDX.RTMR {
		claims.TDX.RTMR[i] = q.RTMR(i)
	}
	pck, notBefore, notAfter, err := q.Signed.Verify(root, opts.At)
	if err != nil {
		return claims, err
	}
	col, err := intelpcs.For(opts.Source, opts.Collateral, "tdx", pck)
	if err != nil {
		return claims, err
	}
	tcb, err := intelpcs.Judge(intelpcs.Platform{PCK: pck.Ext, PCKChain: pck.Certs, QE: q.Signed.QEReport, TDX: &intelpcs.TDXModule{
		TEETCBSVN: q.TEETCBSVN(), TEETCBSVN2: q.TEETCBSVN2(), MRSIGNERSEAM: q.MRSIGNERSEAM(), SEAMAttributes: q.SEAMAttributes(),
	}}, col, opts.At, root, opts.RequireCRLs)
	if err != nil {
		return claims, err
	}
	claims.TCBStatus = tcb.Status
	claims.NotBefore, claims.NotAfter = attest.Later(notBefore, tcb.NotBefore), attest.Earlier(notAfter, tcb.NotAfter)
	return claims, nil
}

// ReportData is a v4 or v5 quote as its declared lengths delimit it
// (without the zero padding of a fixed-size buffer) and the report data
// it carries, read without verifying anything: what a producer checks and
// hands on of the quote its platform returned.
func ReportData(raw []byte) (quote, reportData []byte, err error) {
	q, err := parseQuote(raw)
	if err != nil {
		return nil, nil, err
	}
	return raw[:q.Len], q.ReportData(), nil
}
