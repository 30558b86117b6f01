package wire

import "testing"

// Whatever a peer's certificate carries, ParseMeshID returns an
// identity with every part set, or an error.
func FuzzParseMeshID(f *testing.F) {
	f.Add("spiffe://cas-0011223344556677.cloister/policy/shop/service/web")
	f.Add("spiffe://d/policy/p/service/s/x")
	f.Add("spiffe://d/policy/ns/p/service/s")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseMeshID(s)
		if err != nil {
			return
		}
		if id.TrustDomain == "" || id.Policy == "" || id.Service == "" {
			t.Fatalf("%q: %+v", s, id)
		}
		if again, err := ParseMeshID(id.String()); err != nil || again != id {
			t.Fatalf("%q read as %+v, which reads back as %+v %v", s, id, again, err)
		}
	})
}

// A policy's name may be NAMESPACE/NAME: its identity has one more path
// segment, and reads back as the same identity.
func TestMeshIDOfNamespacedPolicy(t *testing.T) {
	for _, c := range []struct {
		uri, policy, service string
	}{
		{"spiffe://d/policy/shop/service/web", "shop", "web"},
		{"spiffe://d/policy/shop/web/service/api", "shop/web", "api"},
		{"spiffe://d/policy/shop/service/service/api", "shop/service", "api"},
		{"spiffe://d/policy/a/b/c/service/api", "", ""},
		{"spiffe://d/policy//web/service/api", "", ""},
		{"spiffe://d/policy/shop/web/service/", "", ""},
		{"spiffe://d/policy/shop/web/services/api", "", ""},
	} {
		id, err := ParseMeshID(c.uri)
		if c.policy == "" {
			if err == nil {
				t.Errorf("%s: read as %+v", c.uri, id)
			}
			continue
		}
		if err != nil || id.Policy != c.policy || id.Service != c.service {
			t.Errorf("%s: %+v %v, want policy %s service %s", c.uri, id, err, c.policy, c.service)
			continue
		}
		if id.String() != c.uri {
			t.Errorf("%s: written back as %s", c.uri, id)
		}
	}
}

func TestAdmitsNamespacedPolicies(t *testing.T) {
	web := MeshID{TrustDomain: "d", Policy: "shop/web", Service: "api"}
	for _, c := range []struct {
		list []string
		want bool
	}{
		{[]string{"shop/web/api"}, true},
		{[]string{"shop/web/*"}, true},
		{[]string{"shop/*"}, false}, // the namespace is not its names
		{[]string{"web/*"}, false},
		{[]string{"shop/web/db", "other/*"}, false},
		{[]string{"shop/web"}, false}, // policy shop, service web
	} {
		if got := Admits(c.list, web); got != c.want {
			t.Errorf("%v admits %s: %v, want %v", c.list, web, got, c.want)
		}
	}
}

func TestCommonName(t *testing.T) {
	for policy, want := range map[string]string{"shop": "web.shop", "team/shop": "web.shop.team"} {
		if got := CommonName(policy, "web"); got != want {
			t.Errorf("%s: %s, want %s", policy, got, want)
		}
	}
}
