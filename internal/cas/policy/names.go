package policy

import (
	"fmt"
	"strings"
)

// A policy's name is NAME, or NAMESPACE/NAME within the namespace that
// the policy NAMESPACE holds (as SCONE namespaces its sessions). Each part
// is a DNS label, so a namespace can be a Kubernetes namespace: the
// operator registers a SignedPolicy only under its own namespace.

// maxLabel is a DNS label's length.
const maxLabel = 63

// ValidName checks a policy's name.
func ValidName(name string) error {
	ns, n, nested := strings.Cut(name, "/")
	if !nested {
		n, ns = ns, ""
	}
	for _, part := range []string{ns, n} {
		if (nested || part != "") && (!nameRE.MatchString(part) || len(part) > maxLabel) {
			return fmt.Errorf("%q: use NAME or NAMESPACE/NAME, each of lowercase letters, digits and '-', at most %d characters", name, maxLabel)
		}
	}
	return nil
}

// Namespace is the namespace a policy's name is in: "shop" for
// "shop/web", "" for a name of no namespace.
func Namespace(name string) string {
	ns, _, nested := strings.Cut(name, "/")
	if !nested {
		return ""
	}
	return ns
}

// Within says whether name is a name in namespace ns: "shop/web" is in
// "shop", "shop" itself is not.
func Within(name, ns string) bool { return Namespace(name) == ns }

// InNamespace says why a policy resource of Kubernetes namespace ns may
// not register name: a tenant's resources register only its own names.
func InNamespace(name, ns string) error {
	if Within(name, ns) {
		return nil
	}
	_, base, _ := strings.Cut(name, "/")
	if base == "" {
		base = name
	}
	return fmt.Errorf("the policy is named %s, outside namespace %s: a policy resource registers only policies named %s/NAME in CAS; name it %s/%s and sign it again",
		name, ns, ns, ns, base)
}
