package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// A certificate name belongs to the policy that holds it: another policy
// naming it (in any spelling) is refused, a wildcard is refused, the
// holder keeps it across its versions, and once its owners drop it
// another policy may take it.
func TestCertificateNamesAreOwned(t *testing.T) {
	f := newFixture(t, NoSealer{}, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	stranger, _ := policy.NewKey()
	other := func(sans string) string {
		return `version: cloister.dev/policy/v1
name: ledger
owners: {keys: ["` + strings.ReplaceAll(string(policy.MarshalPublicKey(&stranger.PublicKey)), "\n", `\n`) + `"]}
allowSimulation: true
services: [{name: api, attestation: {identities: []}, certificate: {sans: [` + sans + `]}}]
`
	}
	for _, tt := range []struct {
		name, sans string
		want       error
		field      string
	}{
		{"a name the shop holds", "api.ledger.svc, api.shop.svc", ErrNameTaken, `sans[1]: "api.shop.svc" is held by policy shop`},
		{"the shop's IP in another spelling", `"::ffff:10.1.2.3"`, ErrNameTaken, "held by policy shop"},
		{"a wildcard", `"*.svc"`, ErrInvalid, `"*.svc" is a wildcard`},
	} {
		_, err := f.register(other(tt.sans), stranger)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: %v, want %v naming %q", tt.name, err, tt.want, tt.field)
		}
	}
	if _, err := f.cas.Policy("ledger"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused policy was stored: %v", err)
	}
	// The shop's own next version keeps its names; once it drops one, the
	// name is free.
	v2 := strings.Replace(f.policyText(""), "sans: [api.shop.svc, 10.1.2.3]", "sans: [api.shop.svc]", 1)
	if _, err := f.register(v2, f.owner); err != nil {
		t.Fatalf("the holder's next version: %v", err)
	}
	if _, err := f.register(other(`"::ffff:10.1.2.3"`), stranger); err != nil {
		t.Errorf("a name its holder dropped: %v", err)
	}
}
