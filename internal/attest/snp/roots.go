package snp

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"sync"

	"github.com/google/go-sev-guest/verify/trust"

	"github.com/cloister-cc/cloister/internal/attest"
)

// candidate is one set of roots a report may chain to.
type candidate struct {
	roots *trust.AMDRootCerts
	test  bool
}

// amdRoots are AMD's roots of each product line: the ARK and ASK of its
// VCEK chain and the ASVK of its VLEK chain, as AMD's KDS publishes them
// and go-sev-guest embeds them (its DefaultRootCerts leave out Genoa's
// and Turin's ASVK, which would refuse their VLEK-signed reports). A VLEK
// chain under an ARK of its own (Turin's) is a candidate of its own.
var amdRoots = sync.OnceValue(func() map[string][]*trust.AMDRootCerts {
	out := map[string][]*trust.AMDRootCerts{}
	for line, chains := range map[string][2][]byte{
		"Milan": {trust.AskArkMilanVcekBytes, trust.AskArkMilanVlekBytes},
		"Genoa": {trust.AskArkGenoaVcekBytes, trust.AskArkGenoaVlekBytes},
		"Turin": {trust.AskArkTurinVcekBytes, trust.AskArkTurinVlekBytes},
	} {
		vcek := &trust.AMDRootCerts{ProductLine: line}
		if err := vcek.FromKDSCertBytes(chains[0]); err != nil {
			panic("go-sev-guest's embedded " + line + " VCEK chain: " + err.Error())
		}
		out[line] = []*trust.AMDRootCerts{vcek}
		// Read by hand: go-sev-guest's reader refuses Turin's VLEK chain
		// for the newline after it.
		vlek := &trust.AMDRootCerts{ProductLine: line, ProductCerts: &trust.ProductCerts{}}
		for rest := chains[1]; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			c, err := x509.ParseCertificate(block.Bytes)
			switch {
			case err != nil:
			case c.Subject.CommonName == "SEV-VLEK-"+line:
				vlek.ProductCerts.Asvk = c
			case c.Subject.CommonName == "ARK-"+line:
				vlek.ProductCerts.Ark = c
			}
		}
		if vlek.ProductCerts.Asvk == nil || vlek.ProductCerts.Ark == nil {
			continue
		}
		if vlek.ProductCerts.Ark.Equal(vcek.ProductCerts.Ark) {
			vcek.ProductCerts.Asvk = vlek.ProductCerts.Asvk
		} else {
			out[line] = append(out[line], vlek)
		}
	}
	return out
})

// rootsFor returns the roots a product line's endorsement keys may chain
// to: AMD's embedded ones, then a test's when testRoots holds an ARK for
// the line.
func rootsFor(line string, testRoots []*x509.Certificate) ([]candidate, error) {
	var out []candidate
	for _, r := range amdRoots()[line] {
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
