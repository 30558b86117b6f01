package wire

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// MeshID is a workload's mesh identity, a SPIFFE-style URI SAN of its
// certificate naming the CAS that issued it (its trust domain), the
// policy and the service:
//
//	spiffe://cas-<16 hex>.cloister/policy/<policy>/service/<service>
//
// The trust domain is derived from the CAS's root key, so two CASes never
// share one and nothing needs configuring; the mesh authorizes callers by
// it, never by a DNS name a policy chose.
type MeshID struct {
	TrustDomain, Policy, Service string
}

// URI is the identity as a certificate's URI SAN.
func (id MeshID) URI() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: "/policy/" + id.Policy + "/service/" + id.Service}
}

func (id MeshID) String() string { return id.URI().String() }

// CommonName is a workload certificate's subject name: the service, then
// its policy's name, most specific first as in DNS ("web.shop" of policy
// shop; "web.shop.team" of team/shop). It informs; the mesh identity
// authorizes.
func CommonName(policy, service string) string {
	parts := strings.Split(policy, "/")
	slices.Reverse(parts)
	return service + "." + strings.Join(parts, ".")
}

// CertMeshID reads a workload certificate's identity: its one spiffe URI
// SAN.
func CertMeshID(c *x509.Certificate) (MeshID, error) {
	var found []*url.URL
	for _, u := range c.URIs {
		if u.Scheme == "spiffe" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return MeshID{}, fmt.Errorf("certificate %q has %d workload identities (spiffe URI SANs), want one", c.Subject.CommonName, len(found))
	}
	return ParseMeshID(found[0].String())
}

// ParseMeshID reads spiffe://DOMAIN/policy/P/service/S.
func ParseMeshID(s string) (MeshID, error) {
	u, err := url.Parse(s)
	if err != nil {
		return MeshID{}, fmt.Errorf("workload identity %q: %w", s, err)
	}
	// POLICY is NAME or NAMESPACE/NAME: policy/P[/Q]/service/S.
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	n := len(parts)
	if u.Scheme != "spiffe" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		(n != 4 && n != 5) || parts[0] != "policy" || parts[n-2] != "service" || slices.Contains(parts, "") {
		return MeshID{}, fmt.Errorf("workload identity %q: want spiffe://DOMAIN/policy/POLICY/service/SERVICE", s)
	}
	return MeshID{TrustDomain: u.Host, Policy: strings.Join(parts[1:n-2], "/"), Service: parts[n-1]}, nil
}

// MeshAuthz is a service's mesh authorization, by mesh identities of its
// CAS: POLICY/SERVICE or POLICY/*.
type MeshAuthz struct {
	// Allow are the callers its ingress admits.
	Allow []string `json:"allow"`
	// Upstreams are the workloads its egress connects to.
	Upstreams []string `json:"upstreams"`
}

// Admits says whether id is among list.
func Admits(list []string, id MeshID) bool {
	for _, a := range list {
		i := strings.LastIndexByte(a, '/')
		if i < 0 {
			continue
		}
		p, s := a[:i], a[i+1:]
		if p == id.Policy && (s == "*" || s == id.Service) {
			return true
		}
	}
	return false
}
