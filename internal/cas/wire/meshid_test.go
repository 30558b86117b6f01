package wire

import "testing"

// Whatever a peer's certificate carries, ParseMeshID returns an
// identity with every part set, or an error.
func FuzzParseMeshID(f *testing.F) {
	f.Add("spiffe://cas-0011223344556677.cloister/policy/shop/service/web")
	f.Add("spiffe://d/policy/p/service/s/x")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseMeshID(s)
		if err == nil && (id.TrustDomain == "" || id.Policy == "" || id.Service == "") {
			t.Fatalf("%q: %+v", s, id)
		}
	})
}
