package sgx

import (
	"crypto/x509"
	"errors"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// Collateral is Intel PCS data for the quote's platform.
type Collateral = intelpcs.Collateral

// Options of a verification.
type Options struct {
	Collateral Collateral
	// At is the verification time; required.
	At time.Time
	// Root replaces the Intel root (tests of foreign roots); nil: Intel's.
	Root *x509.Certificate
	// Source, when set, gives the collateral for the quote's platform
	// instead of Collateral.
	Source intelpcs.Source
	// RequireCRLs refuses collateral without the PCK CA's and root CA's
	// CRLs.
	RequireCRLs bool
	// TestRoots are taken beside Intel's root for a chain one of them
	// issued (a fake AESM's): insecure, for tests only. Claims verified by
	// one say so (Claims.TestRoot).
	TestRoots []*x509.Certificate
}

// Verify checks a v3 quote and returns its claims; every failure is an
// attest.Rejection naming the check, returned with the claims read so far
// (nil when the quote could not be parsed).
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("sgx: a verification time is required")
	}
	root := opts.Root
	if root == nil {
		root = intelpcs.Root()
	}
	q, err := parseQuote(raw)
	if err != nil {
		return nil, err
	}
	testRoot := false
	if r := intelpcs.TestRootOf(q.certData, opts.TestRoots); opts.Root == nil && r != nil {
		root, testRoot = r, true
	}
	// What the quote says is returned with any later rejection too: the
	// user debugging a failed attestation wants to see it.
	claims := &attest.Claims{
		Type:       attest.SGX,
		Debug:      q.body.Debug(),
		ReportData: attest.Bytes(q.body.ReportData()),
		SGX:        identity(q.body),
		TestRoot:   testRoot,
	}
	signed := intelpcs.Signed{Body: q.signed, Sig: q.sig, AttKey: q.attKey, QEReport: q.qeReport, QESig: q.qeSig, QEAuth: q.qeAuth, PCKChain: q.certData}
	pck, notBefore, notAfter, err := signed.Verify(root, opts.At)
	if err != nil {
		return claims, err
	}
	col, err := intelpcs.For(opts.Source, opts.Collateral, "sgx", pck)
	if err != nil {
		return claims, err
	}
	tcb, err := intelpcs.Judge(intelpcs.Platform{PCK: pck.Ext, PCKChain: pck.Certs, QE: q.qeReport}, col, opts.At, root, opts.RequireCRLs)
	if err != nil {
		return claims, err
	}
	claims.TCBStatus = tcb.Status
	claims.NotBefore, claims.NotAfter = attest.Later(notBefore, tcb.NotBefore), attest.Earlier(notAfter, tcb.NotAfter)
	return claims, nil
}
