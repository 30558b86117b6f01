package core

import (
	"crypto/ecdsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
)

// A certificate name belongs to the policy that holds it: another policy
// naming it (in any spelling, or under a wildcard) is refused, a wildcard
// is refused unless the board signed the version, the holder keeps its
// names across its versions, and once its owners drop one another policy
// may take it.
func TestCertificateNamesAreOwned(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	stranger, _ := policy.NewKey()
	named := func(name, sans string) string {
		return `version: cloister.dev/policy/v1
name: ` + name + `
owners: {keys: ["` + strings.ReplaceAll(string(policy.MarshalPublicKey(&stranger.PublicKey)), "\n", `\n`) + `"]}
allowSimulation: true
services: [{name: api, attestation: {identities: []}, certificate: {sans: [` + sans + `]}}]
`
	}
	other := func(sans string) string { return named("ledger", sans) }
	for _, tt := range []struct {
		name, sans string
		want       error
		field      string
	}{
		{"a name the shop holds", "api.ledger.svc, api.shop.svc", ErrNameTaken, `sans[1]: "api.shop.svc" is held by policy shop`},
		{"the shop's IP in another spelling", `"::ffff:10.1.2.3"`, ErrNameTaken, "held by policy shop"},
		{"a wildcard over the shop's names, though the board signs", `"*.shop.svc"`, ErrNameTaken, `"*.shop.svc" is held by policy shop (as "api.shop.svc")`},
	} {
		_, err := f.register(other(tt.sans), stranger) // version 1: the board signs it too
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: %v, want %v naming %q", tt.name, err, tt.want, tt.field)
		}
	}
	if _, err := f.cas.Policy("ledger"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused policy was stored: %v", err)
	}
	// A wildcard of its own: only with the board's signature on the
	// version that names it.
	if _, err := f.register(other("api.ledger.svc"), stranger); err != nil {
		t.Fatal(err)
	}
	wild := other(`api.ledger.svc, "*.ledger.svc"`)
	if _, err := f.registerAt(wild, f.next(wild), stranger); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"*.ledger.svc" is a wildcard`) {
		t.Errorf("a wildcard its owners alone signed: %v", err)
	}
	if _, err := f.registerAt(wild, f.next(wild), stranger, f.rec[0]); err != nil {
		t.Fatalf("a wildcard the board allowed: %v", err)
	}
	if _, err := f.register(named("web", "pay.ledger.svc"), stranger); !errors.Is(err, ErrNameTaken) || !strings.Contains(err.Error(), `held by policy ledger (as "*.ledger.svc")`) {
		t.Errorf("a name under another policy's wildcard: %v", err)
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

// New names stop at CAS's quota and at a namespace's; a policy already
// held still takes its next version.
func TestNameQuotas(t *testing.T) {
	f := &fixture{t: t, dir: t.TempDir(), maxPolicies: 3, maxPerNamespace: 1}
	f.lasKey, _ = policy.NewKey()
	f.open(seal.NoSealer{})
	rec, _ := policy.NewKey()
	f.rec = []*ecdsa.PrivateKey{rec}
	if _, err := f.cas.Init([]*ecdsa.PublicKey{&rec.PublicKey}, 1, testToken); err != nil {
		t.Fatal(err)
	}
	f.owner, _ = policy.NewKey()
	owner := indent(string(policy.MarshalPublicKey(&f.owner.PublicKey)))
	doc := func(name, extra string) string {
		return "version: cloister.dev/policy/v1\nname: " + name + "\nowners:\n  keys:\n  - |\n" + owner + "\nservices: []\n" + extra
	}
	for _, name := range []string{"team", "team/a"} {
		if _, err := f.register(doc(name, ""), f.owner); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := f.register(doc("team/b", ""), f.owner); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "namespace team holds 1 policies") {
		t.Errorf("a second name in a namespace of quota 1: %v", err)
	}
	if _, err := f.register(doc("solo", ""), f.owner); err != nil {
		t.Fatal(err)
	}
	if _, err := f.register(doc("more", ""), f.owner); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "CAS holds 3 policies, its limit") {
		t.Errorf("a name beyond CAS's quota: %v", err)
	}
	if _, err := f.register(doc("solo", "read: any\n"), f.owner); err != nil {
		t.Errorf("the next version of a policy held at the quota: %v", err)
	}
}

// Making a policy's secrets holds no lock: while one registration makes
// its keys, another registers; then the first stores its version with
// the keys it made.
func TestSecretsMadeOutsideTheLock(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	making, release := make(chan struct{}), make(chan struct{})
	testHookMakeSecrets = func(name string) {
		if name == "shop" {
			close(making)
			<-release
		}
	}
	t.Cleanup(func() { testHookMakeSecrets = nil })
	done := make(chan error, 1)
	go func() {
		_, err := f.register(f.policyText(""), f.owner)
		done <- err
	}()
	<-making
	other := "version: cloister.dev/policy/v1\nname: other\nowners:\n  keys:\n  - |\n" +
		indent(string(policy.MarshalPublicKey(&f.owner.PublicKey))) + "\nservices: []\n"
	registered := make(chan error, 1)
	go func() {
		_, err := f.register(other, f.owner)
		registered <- err
	}()
	select {
	case err := <-registered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a registration waited while another made its keys")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); err != nil {
		t.Errorf("the version stored with the secrets made outside the lock: %v", err)
	}
}
