package policy

import "testing"

func TestWildcardCovers(t *testing.T) {
	for _, c := range []struct {
		wildcard, name string
		want           bool
	}{
		{"*.shop.svc", "api.shop.svc", true},
		{"*.shop.svc", "shop.svc", false},
		{"*.shop.svc", "a.b.shop.svc", false},
		{"*.shop.svc", "*.shop.svc", false}, // equal, compared as such
		{"api.shop.svc", "api.shop.svc", false},
		{"*.svc", "api.shop.svc", false},
	} {
		if got := Covers(c.wildcard, c.name); got != c.want {
			t.Errorf("%s covers %s: %v", c.wildcard, c.name, got)
		}
	}
}
