package attest

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/memo"
)

// maxCRL bounds a CRL: Intel's PCK CRLs list a few thousand serials.
const maxCRL = 4 << 20

// crl is a CRL whose signature verified with its issuer.
type crl struct {
	nextUpdate time.Time
	revoked    map[string]bool // serial (big-endian bytes, as a string)
}

// verifiedCRLs holds CRLs by their bytes and issuer: one CRL serves every
// quote under its CA until its next update.
var verifiedCRLs = memo.New[*crl](64)

// NotRevoked checks raw (a CRL as vendors serve them: DER, PEM, or DER in
// hex) is issuer's, current at the given time, and lists none of certs;
// it returns the CRL's next update. what names the CRL in rejections.
//
// A CRL issued after the verification time knows at least as much as one
// current then, so historical evidence is judged by a later list, never
// by none; a CRL whose next update has passed is stale and refused.
func NotRevoked(what string, raw []byte, issuer *x509.Certificate, at time.Time, certs ...*x509.Certificate) (time.Time, error) {
	l, err := parseCRL(what, raw, issuer)
	if err != nil {
		return time.Time{}, err
	}
	if at.After(l.nextUpdate) {
		return time.Time{}, Reject(CheckValidity, "the %s's next update was %s, before %s: fetch a current one",
			what, l.nextUpdate.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
	}
	for _, cert := range certs {
		if l.revoked[string(cert.SerialNumber.Bytes())] {
			return time.Time{}, Reject(CheckRevoked, "%q (serial %x) is revoked by the %s", cert.Subject.CommonName, cert.SerialNumber.Bytes(), what)
		}
	}
	return l.nextUpdate, nil
}

// parseCRL reads a CRL and checks it is issuer's, once per CRL and issuer.
func parseCRL(what string, raw []byte, issuer *x509.Certificate) (*crl, error) {
	if len(raw) > maxCRL {
		return nil, Reject(CheckCollateral, "the %s is %d bytes: at most %d", what, len(raw), maxCRL)
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
		return nil, Reject(CheckCollateral, "the %s: %v", what, err)
	}
	if !bytes.Equal(list.RawIssuer, issuer.RawSubject) {
		return nil, Reject(CheckCollateral, "the %s is issued by %q, want %q", what, list.Issuer.CommonName, issuer.Subject.CommonName)
	}
	if err := list.CheckSignatureFrom(issuer); err != nil {
		return nil, Reject(CheckCollateral, "the %s's signature does not verify with %q: %v", what, issuer.Subject.CommonName, err)
	}
	if list.NextUpdate.IsZero() {
		return nil, Reject(CheckCollateral, "the %s has no next update", what)
	}
	l := &crl{nextUpdate: list.NextUpdate, revoked: make(map[string]bool, len(list.RevokedCertificateEntries))}
	for _, e := range list.RevokedCertificateEntries {
		l.revoked[string(e.SerialNumber.Bytes())] = true
	}
	verifiedCRLs.Put(key, l)
	return l, nil
}
