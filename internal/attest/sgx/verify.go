package sgx

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-tdx-guest/pcs"

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
	// What the quote says is returned with any later rejection too: the
	// user debugging a failed attestation wants to see it.
	claims := &attest.Claims{
		Type:       attest.SGX,
		Debug:      q.body.Debug(),
		ReportData: attest.Bytes(q.body.ReportData()),
		SGX:        identity(q.body),
	}
	attKey, err := p256Key(q.attKey)
	if err != nil {
		return claims, attest.Reject(attest.CheckFormat, "attestation key: %v", err)
	}
	if !intelpcs.VerifyRS(attKey, q.signed, q.sig) {
		return claims, attest.Reject(attest.CheckSignature, "the quote signature does not verify with the attestation key")
	}
	pck, err := intelpcs.ParseChain("PCK certificate chain", bytes.TrimRight(q.certData, "\x00"))
	if err != nil {
		return claims, err
	}
	notBefore, notAfter, err := attest.VerifyChain("PCK certificate chain", pck, root, opts.At)
	if err != nil {
		return claims, err
	}
	pckKey, ok := pck[0].PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return claims, attest.Reject(attest.CheckChain, "the PCK certificate's key is %T, want ECDSA", pck[0].PublicKey)
	}
	if !intelpcs.VerifyRS(pckKey, q.qeReport, q.qeSig) {
		return claims, attest.Reject(attest.CheckSignature, "the QE report signature does not verify with the PCK certificate")
	}
	// The QE vouches for the attestation key by putting its hash (with
	// the QE authentication data) into its report data.
	want := sha256.Sum256(append(append([]byte(nil), q.attKey...), q.qeAuth...))
	if rd := q.qeReport.ReportData(); !bytes.Equal(rd[:32], want[:]) || !allZero(rd[32:]) {
		return claims, attest.Reject(attest.CheckBinding, "the QE report does not bind the attestation key")
	}
	ext, err := pcs.PckCertificateExtensions(pck[0])
	if err != nil {
		return claims, attest.Reject(attest.CheckChain, "reading the PCK certificate's SGX extensions: %v", err)
	}
	tcb, err := intelpcs.Judge(intelpcs.Platform{PCK: ext, QE: q.qeReport}, opts.Collateral, opts.At, root)
	if err != nil {
		return claims, err
	}
	claims.TCBStatus = tcb.Status
	claims.NotBefore, claims.NotAfter = attest.Later(notBefore, tcb.NotBefore), attest.Earlier(notAfter, tcb.NotAfter)
	return claims, nil
}

// p256Key reads an uncompressed x||y P-256 point.
func p256Key(xy []byte) (*ecdsa.PublicKey, error) {
	if len(xy) != 64 {
		return nil, fmt.Errorf("%d bytes, want 64", len(xy))
	}
	k, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append([]byte{4}, xy...))
	if err != nil {
		return nil, errors.New("not a point on P-256")
	}
	return k, nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
