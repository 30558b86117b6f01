package snp

import (
	"crypto/x509"
	"strings"

	"github.com/google/go-sev-guest/verify/trust"

	"github.com/cloister-cc/cloister/internal/attest"
)

// candidate is one set of roots a report may chain to.
type candidate struct {
	roots *trust.AMDRootCerts
	test  bool
}

// rootsFor returns the roots a product line's endorsement keys may chain
// to: AMD's embedded ones, then a test's when testRoots holds an ARK for
// the line.
func rootsFor(line string, testRoots []*x509.Certificate) ([]candidate, error) {
	var out []candidate
	if r := trust.DefaultRootCerts[line]; r != nil && r.ProductCerts != nil {
		out = append(out, candidate{roots: r})
	}
	test, err := testRootsFor(line, testRoots)
	if test != nil {
		out = append(out, candidate{roots: test, test: true})
	}
	return out, err
}

func testRootsFor(line string, testRoots []*x509.Certificate) (*trust.AMDRootCerts, error) {
	pc := &trust.ProductCerts{}
	for _, c := range testRoots {
		switch c.Subject.CommonName {
		case "ARK-" + line:
			pc.Ark = c
		case "SEV-" + line:
			pc.Ask = c
		case "SEV-VLEK-" + line:
			pc.Asvk = c
		}
	}
	if pc.Ark == nil {
		return nil, nil
	}
	if pc.Ask == nil {
		return nil, attest.Reject(attest.CheckChain, "the test roots hold ARK-%s but no ASK (SEV-%s)", line, line)
	}
	return &trust.AMDRootCerts{ProductLine: line, ProductCerts: pc}, nil
}

// IsTestRoot says whether c is a certificate TestRoots takes: an AMD
// ARK, ASK or ASVK by its name.
func IsTestRoot(c *x509.Certificate) bool {
	n := c.Subject.CommonName
	return strings.HasPrefix(n, "ARK-") || strings.HasPrefix(n, "SEV-")
}
