package intelpcs

import (
	"bytes"
	"crypto/x509"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// revocation applies the CRLs the collateral carries: the PCK CA's CRL to
// the PCK certificate, the root CA's CRL to every certificate the root
// issued (the PCK CA, the TCB signing certificate). With require, both
// CRLs must be there. It returns the earliest next update of the CRLs
// applied.
func revocation(pck, signing []*x509.Certificate, root *x509.Certificate, c Collateral, at time.Time, require bool) (time.Time, error) {
	if require && (len(c.PCKCRL) == 0 || len(c.RootCRL) == 0) {
		return time.Time{}, attest.Reject(attest.CheckCollateral, "the PCK CA's and the root CA's CRLs are required to check revocation")
	}
	var next time.Time
	check := func(what string, raw []byte, issuer *x509.Certificate, certs ...*x509.Certificate) error {
		if len(raw) == 0 {
			return nil
		}
		n, err := attest.NotRevoked(what, raw, issuer, at, certs...)
		next = attest.Earlier(next, n)
		return err
	}
	if len(c.PCKCRL) == 0 && len(c.RootCRL) == 0 {
		return next, nil
	}
	if len(pck) < 2 {
		return next, attest.Reject(attest.CheckChain, "the PCK certificate chain has no issuing CA")
	}
	if err := check("PCK CA's CRL", c.PCKCRL, pck[1], pck[0]); err != nil {
		return next, err
	}
	var issued []*x509.Certificate
	for _, cert := range append(pck[1:len(pck):len(pck)], signing...) {
		if bytes.Equal(cert.RawIssuer, root.RawSubject) && !cert.Equal(root) {
			issued = append(issued, cert)
		}
	}
	return next, check("root CA's CRL", c.RootCRL, root, issued...)
}
