package pki

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
)

// A workload's mesh identity is a SPIFFE-style URI SAN naming the CAS
// that issued it (its trust domain), the policy and the service:
//
//	spiffe://cas-<16 hex>.cloister/policy/<policy>/service/<service>
//
// The trust domain is derived from the CAS's root key, so two CASes never
// share one and nothing needs configuring; the mesh authorizes callers by
// it, never by a DNS name a policy chose.
type Identity struct {
	TrustDomain, Policy, Service string
}

// URI is the identity as a certificate's URI SAN.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: "/policy/" + id.Policy + "/service/" + id.Service}
}

func (id Identity) String() string { return id.URI().String() }

// TrustDomain is the CAS's trust domain: a name of its root key.
func (a *Authority) TrustDomain() string {
	h := sha256.Sum256(a.Root.Cert.RawSubjectPublicKeyInfo)
	return "cas-" + hex.EncodeToString(h[:8]) + ".cloister"
}

// WorkloadIdentity reads a workload certificate's identity: its one
// spiffe URI SAN.
func WorkloadIdentity(c *x509.Certificate) (Identity, error) {
	var found []*url.URL
	for _, u := range c.URIs {
		if u.Scheme == "spiffe" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return Identity{}, fmt.Errorf("certificate %q has %d workload identities (spiffe URI SANs), want one", c.Subject.CommonName, len(found))
	}
	return ParseIdentity(found[0].String())
}

// ParseIdentity reads spiffe://DOMAIN/policy/P/service/S.
func ParseIdentity(s string) (Identity, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Identity{}, fmt.Errorf("workload identity %q: %w", s, err)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if u.Scheme != "spiffe" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		len(parts) != 4 || parts[0] != "policy" || parts[2] != "service" || parts[1] == "" || parts[3] == "" {
		return Identity{}, fmt.Errorf("workload identity %q: want spiffe://DOMAIN/policy/POLICY/service/SERVICE", s)
	}
	return Identity{TrustDomain: u.Host, Policy: parts[1], Service: parts[3]}, nil
}
