package attest

import (
	"crypto/x509"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/memo"
)

// verifiedChains remembers chains whose signatures lead to their root:
// the same PCK, VCEK or enclave chain comes with every quote of its
// platform.
var verifiedChains = memo.New[struct{}](4096)

// VerifyChain checks that chain (leaf first, then its intermediates; a copy
// of the root may end it) leads to root, with every certificate valid at
// the given time, and returns the window in which they all are. what names
// the chain in rejections.
func VerifyChain(what string, chain []*x509.Certificate, root *x509.Certificate, at time.Time) (notBefore, notAfter time.Time, err error) {
	if notBefore, notAfter, err = ValidAt(what, append(chain[:len(chain):len(chain)], root), at); err != nil {
		return time.Time{}, time.Time{}, err
	}
	// What Verify checks beyond validity (signatures, constraints, key
	// usage) depends on the certificates alone.
	key := chainKey(chain, root)
	if _, ok := verifiedChains.Get(key); ok {
		return notBefore, notAfter, nil
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return time.Time{}, time.Time{}, Reject(CheckChain, "%s does not chain to the %s: %v", what, root.Subject.CommonName, err)
	}
	verifiedChains.Put(key, struct{}{})
	return notBefore, notAfter, nil
}

func chainKey(chain []*x509.Certificate, root *x509.Certificate) memo.Key {
	parts := make([][]byte, 0, len(chain)+1)
	for _, c := range chain {
		parts = append(parts, c.Raw)
	}
	return memo.KeyOf(append(parts, root.Raw)...)
}

// ValidAt checks every certificate is valid at the given time (and
// nothing else) and returns the window in which they all are.
func ValidAt(what string, certs []*x509.Certificate, at time.Time) (notBefore, notAfter time.Time, err error) {
	for _, c := range certs {
		if at.Before(c.NotBefore) || at.After(c.NotAfter) {
			return time.Time{}, time.Time{}, Reject(CheckValidity, "%s: %q is valid from %s to %s, not at %s", what,
				c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339Nano))
		}
		notBefore, notAfter = Later(notBefore, c.NotBefore), Earlier(notAfter, c.NotAfter)
	}
	return notBefore, notAfter, nil
}

// Later is the later of two times; a zero time counts as unset.
func Later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// Earlier is the earlier of two times; a zero time counts as unset.
func Earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// parsedCerts holds certificates by their DER: a Nitro document carries
// AWS's CA bundle, parsed again otherwise with every document. Bounded,
// so certificates an attacker sends only push others out.
var parsedCerts = memo.New[*x509.Certificate](1024)

// ParseCertificate is x509.ParseCertificate, remembered by the DER's
// SHA-256. The certificate is shared: callers must not change it.
func ParseCertificate(der []byte) (*x509.Certificate, error) {
	key := memo.KeyOf(der)
	if c, ok := parsedCerts.Get(key); ok {
		return c, nil
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	parsedCerts.Put(key, c)
	return c, nil
}
