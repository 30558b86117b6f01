// Package tdx verifies Intel TDX quotes (v4) offline: go-tdx-guest parses
// the quote and checks its layout; intelpcs checks its signatures, the QE
// report's binding of the attestation key and the PCK chain to the pinned
// Intel root as for SGX (chains once, so a quote costs its signatures), and
// judges the caller's Intel PCS collateral, so every TCB status Intel
// defines is reported for the policy to accept or refuse, where
// go-tdx-guest itself accepts UpToDate only.
package tdx

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-tdx-guest/abi"
	pb "github.com/google/go-tdx-guest/proto/tdx"

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

// signedLen is what a v4 quote's attestation key signs: the header and
// the TD report body.
const signedLen = 48 + 584

// Verify checks a v4 quote and returns its claims (with those read so far
// on a rejection).
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("tdx: a verification time is required")
	}
	root := opts.Root
	if root == nil {
		root = intelpcs.Root()
	}
	quote, err := parseV4(raw)
	if err != nil {
		return nil, err
	}
	if n := len(quote.GetExtraBytes()); n > 0 {
		return nil, attest.Reject(attest.CheckFormat, "%d trailing bytes after the quote", n)
	}
	if err := abi.CheckQuoteV4(quote); err != nil {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote: %v", err)
	}
	if len(raw) < signedLen {
		return nil, attest.Reject(attest.CheckFormat, "truncated TDX quote: %d bytes", len(raw))
	}
	body := quote.GetTdQuoteBody()
	claims := &attest.Claims{
		Type:       attest.TDX,
		Debug:      body.GetTdAttributes()[0]&tdAttributeDebug != 0,
		ReportData: body.GetReportData(),
		TDX:        &attest.TDXIdentity{MRTD: body.GetMrTd(), MRSEAM: body.GetMrSeam(), MRCONFIGID: body.GetMrConfigId(), TDAttributes: body.GetTdAttributes()},
	}
	for i, r := range body.GetRtmrs() {
		if i < len(claims.TDX.RTMR) {
			claims.TDX.RTMR[i] = r
		}
	}
	certification := quote.GetSignedData().GetCertificationData().GetQeReportCertificationData()
	qeReport, err := abi.EnclaveReportToAbiBytes(certification.GetQeReport())
	if err != nil {
		return claims, attest.Reject(attest.CheckFormat, "QE report: %v", err)
	}
	signed := intelpcs.Signed{
		Body:     raw[:signedLen],
		Sig:      quote.GetSignedData().GetSignature(),
		AttKey:   quote.GetSignedData().GetEcdsaAttestationKey(),
		QEReport: qeReport,
		QESig:    certification.GetQeReportSignature(),
		QEAuth:   certification.GetQeAuthData().GetData(),
		PCKChain: certification.GetPckCertificateChainData().GetPckCertChain(),
	}
	pck, notBefore, notAfter, err := signed.Verify(root, opts.At)
	if err != nil {
		return claims, err
	}
	col, err := intelpcs.For(opts.Source, opts.Collateral, "tdx", pck)
	if err != nil {
		return claims, err
	}
	tcb, err := intelpcs.Judge(intelpcs.Platform{PCK: pck.Ext, PCKChain: pck.Certs, QE: qeReport, TDX: &intelpcs.TDXModule{
		TEETCBSVN: body.GetTeeTcbSvn(), MRSIGNERSEAM: body.GetMrSignerSeam(), SEAMAttributes: body.GetSeamAttributes(),
	}}, col, opts.At, root, opts.RequireCRLs)
	if err != nil {
		return claims, err
	}
	claims.TCBStatus = tcb.Status
	claims.NotBefore, claims.NotAfter = attest.Later(notBefore, tcb.NotBefore), attest.Earlier(notAfter, tcb.NotAfter)
	return claims, nil
}

// quoteToProto is abi.QuoteToProto, with a panic made an error: v0.3.1
// slices by a length field of the quote before checking it (QE
// authentication data; fixed upstream after that release, google/go-tdx-guest
// pull 104), so a forged quote would crash its verifier, CAS included.
func quoteToProto(raw []byte) (q any, err error) {
	defer func() {
		if r := recover(); r != nil {
			q, err = nil, fmt.Errorf("malformed quote (a length field points past its end): %v", r)
		}
	}()
	return abi.QuoteToProto(raw)
}

// ReportData is the report data a v4 quote carries, read without
// verifying anything: what a producer checks of the quote its platform
// returned before handing it on.
func ReportData(raw []byte) ([]byte, error) {
	quote, err := parseV4(raw)
	if err != nil {
		return nil, err
	}
	return quote.GetTdQuoteBody().GetReportData(), nil
}

func parseV4(raw []byte) (*pb.QuoteV4, error) {
	q, err := quoteToProto(raw)
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote: %v", err)
	}
	quote, ok := q.(*pb.QuoteV4)
	if !ok {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote is %T, want a v4 quote", q)
	}
	return quote, nil
}
