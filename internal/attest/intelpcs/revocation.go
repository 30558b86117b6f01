package intelpcs

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/memo"
)

// maxCRL bounds a CRL: Intel's PCK CRLs list a few thousand serials.
const maxCRL = 4 << 20

// crl is a CRL whose signature verified with its issuer.
type crl struct {
	thisUpdate, nextUpdate time.Time
	revoked                map[string]bool // serial (big-endian bytes, as a string)
}

// verifiedCRLs holds CRLs by their bytes and issuer: one PCK CRL serves
// every quote of every platform under its CA until its next update.
var verifiedCRLs = memo.New[*crl](64)

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
	check := func(what string, der []byte, issuer *x509.Certificate, certs ...*x509.Certificate) error {
		if len(der) == 0 {
			return nil
		}
		l, err := parseCRL(what, der, issuer)
		if err != nil {
			return err
		}
		// A CRL issued after the verification time knows at least as much
		// as one current then (historical evidence is judged by a later
		// list, never by none); one whose next update has passed is stale.
		if at.After(l.nextUpdate) {
			return attest.Reject(attest.CheckValidity, "the %s's next update was %s, before %s: fetch a current one",
				what, l.nextUpdate.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
		}
		next = attest.Earlier(next, l.nextUpdate)
		for _, cert := range certs {
			if l.revoked[string(cert.SerialNumber.Bytes())] {
				return attest.Reject(attest.CheckRevoked, "%q (serial %x) is revoked by the %s", cert.Subject.CommonName, cert.SerialNumber.Bytes(), what)
			}
		}
		return nil
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

// parseCRL reads a CRL as PCS and PCCS serve them (DER, PEM, or DER in
// hex) and checks it is issuer's, once per CRL and issuer.
func parseCRL(what string, raw []byte, issuer *x509.Certificate) (*crl, error) {
	if len(raw) > maxCRL {
		return nil, attest.Reject(attest.CheckCollateral, "the %s is %d bytes: at most %d", what, len(raw), maxCRL)
	}
	key := memo.KeyOf(raw, issuer.Raw)
	if l, ok := verifiedCRLs.Get(key); ok {
		return l, nil
	}
	der := raw
	if block, _ := pem.Decode(raw); block != nil {
		der = block.Bytes
	} else if d, err := hex.DecodeString(string(bytes.TrimSpace(raw))); err == nil {
		der = d
	}
	list, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, attest.Reject(attest.CheckCollateral, "the %s: %v", what, err)
	}
	if !bytes.Equal(list.RawIssuer, issuer.RawSubject) {
		return nil, attest.Reject(attest.CheckCollateral, "the %s is issued by %q, want %q", what, list.Issuer.CommonName, issuer.Subject.CommonName)
	}
	if err := list.CheckSignatureFrom(issuer); err != nil {
		return nil, attest.Reject(attest.CheckCollateral, "the %s's signature does not verify with %q: %v", what, issuer.Subject.CommonName, err)
	}
	l := &crl{thisUpdate: list.ThisUpdate, nextUpdate: list.NextUpdate, revoked: make(map[string]bool, len(list.RevokedCertificateEntries))}
	if l.nextUpdate.IsZero() {
		return nil, attest.Reject(attest.CheckCollateral, "the %s has no next update", what)
	}
	for _, e := range list.RevokedCertificateEntries {
		l.revoked[string(e.SerialNumber.Bytes())] = true
	}
	verifiedCRLs.Put(key, l)
	return l, nil
}
