package core

import (
	"fmt"
	"net"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// certificateNames refuses a document whose certificates would name what
// it does not own: a wildcard, which names every service under it, or a
// name (DNS or IP) that another policy's current version holds. A name is
// held by one policy until that policy's owners drop it.
func certificateNames(policies map[string]*registered, doc *policy.Document) error {
	held := map[string]string{}
	for name, r := range policies {
		if name == doc.Name || r.doc == nil {
			continue
		}
		for _, svc := range r.doc.Services {
			for _, san := range svc.Certificate.SANs {
				held[canonicalSAN(san)] = name
			}
		}
	}
	for _, svc := range doc.Services {
		for i, san := range svc.Certificate.SANs {
			field := fmt.Sprintf("services[%s].certificate.sans[%d]", svc.Name, i)
			if strings.HasPrefix(san, "*.") {
				return fmt.Errorf("%w: policy %s: %s: %q is a wildcard, which would name every service under %s, other policies' too: list the names the service is reached by",
					ErrInvalid, doc.Name, field, san, strings.TrimPrefix(san, "*."))
			}
			if other, ok := held[canonicalSAN(san)]; ok {
				return fmt.Errorf("%w: policy %s: %s: %q is held by policy %s, whose workloads it names: use a name of your own, or have that policy's owners drop it first",
					ErrNameTaken, doc.Name, field, san, other)
			}
		}
	}
	return nil
}

// canonicalSAN is one spelling per name: an IP address in its shortest
// form (::ffff:10.0.0.1 and 10.0.0.1 are one address), DNS names lower
// case.
func canonicalSAN(san string) string {
	if ip := net.ParseIP(san); ip != nil {
		return ip.String()
	}
	return strings.ToLower(san)
}
