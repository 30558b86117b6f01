package policy

import (
	"maps"
	"net"
	"slices"
	"strings"
)

// Certificate names (SANs): one spelling each, and which names a
// wildcard covers, as a TLS client matches them.

// Holder is the held name that san is, is covered by, or covers, and the
// policy holding it. Only a wildcard's own check looks at every name.
func Holder(held map[string]string, san string) (name, holder string) {
	if p, ok := held[san]; ok {
		return san, p
	}
	if !IsWildcard(san) {
		if _, rest, ok := strings.Cut(san, "."); ok {
			if p, ok := held["*."+rest]; ok {
				return "*." + rest, p
			}
		}
		return "", ""
	}
	for _, name := range slices.Sorted(maps.Keys(held)) { // the first, in an order that does not change
		if Covers(san, name) {
			return name, held[name]
		}
	}
	return "", ""
}

// IsWildcard says whether san is a wildcard, *.DOMAIN.
func IsWildcard(san string) bool { return strings.HasPrefix(san, "*.") }

// Covers says whether wildcard names name, as a TLS client matches it:
// *.shop.svc covers api.shop.svc, not shop.svc nor a.b.shop.svc.
func Covers(wildcard, name string) bool {
	if !IsWildcard(wildcard) || IsWildcard(name) {
		return false
	}
	label, rest, ok := strings.Cut(name, ".")
	return ok && label != "" && rest == wildcard[2:]
}

// HasWildcard says whether the document's certificates name a wildcard.
func (d *Document) HasWildcard() bool {
	for _, svc := range d.Services {
		for _, san := range svc.Certificate.SANs {
			if IsWildcard(san) {
				return true
			}
		}
	}
	return false
}

// CanonicalSAN is one spelling per name: an IP address in its shortest
// form (::ffff:10.0.0.1 and 10.0.0.1 are one address), DNS names lower
// case.
func CanonicalSAN(san string) string {
	if ip := net.ParseIP(san); ip != nil {
		return ip.String()
	}
	return strings.ToLower(san)
}
