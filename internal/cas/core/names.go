package core

import (
	"crypto/ecdsa"
	"fmt"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// certificateNames refuses a document whose certificates would name what
// it does not own: a name (DNS or IP) that another policy's current
// version holds, or covers with a wildcard; or a wildcard, which names
// every service under it, unless the board allowed it by signing this
// version (boardSigned: its threshold of keys, as for a new name), and then only where no other policy holds a name
// it covers. A name is held by one policy until that policy's owners drop
// it.
func certificateNames(policies map[string]*registered, doc *policy.Document, boardSigned bool) error {
	held := map[string]string{}
	for name, r := range policies {
		if name == doc.Name || r.doc == nil {
			continue
		}
		for _, svc := range r.doc.Services {
			for _, san := range svc.Certificate.SANs {
				held[policy.CanonicalSAN(san)] = name
			}
		}
	}
	for _, svc := range doc.Services {
		for i, san := range svc.Certificate.SANs {
			field := fmt.Sprintf("services[%s].certificate.sans[%d]", svc.Name, i)
			san = policy.CanonicalSAN(san)
			if policy.IsWildcard(san) && !boardSigned {
				return fmt.Errorf("%w: policy %s: %s: %q is a wildcard, which would name every service under %s, other policies' too: list the names the service is reached by, or have the board allow it by signing this version",
					ErrInvalid, doc.Name, field, san, strings.TrimPrefix(san, "*."))
			}
			if name, other := policy.Holder(held, san); other != "" {
				return fmt.Errorf("%w: policy %s: %s: %q is held by policy %s (as %q), whose workloads it names: use a name of your own, or have that policy's owners drop it first",
					ErrNameTaken, doc.Name, field, san, other, name)
			}
		}
	}
	return nil
}

// Default quotas of names. A policy costs CAS its history, its secrets
// and, at each registration, a look at every certificate name; board
// approval keeps strangers out, the quotas keep approved tenants from
// crowding each other out.
const (
	DefaultMaxPolicies     = 10000
	DefaultMaxPerNamespace = 1000
)

// quota refuses a new name beyond CAS's quota or its namespace's.
func (c *CAS) quota(policies map[string]*registered, name string) error {
	limit, perNS := c.cfg.MaxPolicies, c.cfg.MaxPerNamespace
	if limit == 0 {
		limit = DefaultMaxPolicies
	}
	if perNS == 0 {
		perNS = DefaultMaxPerNamespace
	}
	if len(policies) >= limit {
		return fmt.Errorf("%w: CAS holds %d policies, its limit: a new name needs one dropped or a higher limit", ErrQuota, len(policies))
	}
	ns := policy.Namespace(name)
	if ns == "" {
		return nil
	}
	n := 0
	for other := range policies {
		if policy.Within(other, ns) {
			n++
		}
	}
	if n >= perNS {
		return fmt.Errorf("%w: namespace %s holds %d policies, the limit of one namespace", ErrQuota, ns, n)
	}
	return nil
}

// countSigned counts the keys among the signers (fingerprints whose
// signatures verified).
func countSigned(keys []*ecdsa.PublicKey, signers map[string]bool) int {
	n := 0
	for _, k := range keys {
		if signers[policy.Fingerprint(k)] {
			n++
		}
	}
	return n
}
