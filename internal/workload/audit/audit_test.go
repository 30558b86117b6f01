package audit_test

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/workload/audit"
)

// bundleOf is the bundle of a real CAS's manifest "shop", of two
// versions, written after a client saw version 1's checkpoint; and what
// its CAS must be.
func bundleOf(t *testing.T) ([]byte, casclient.Expect) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	url, caFile, _ := castest.Start(t, dir, "none")
	expect := casclient.Expect{Policy: attest.Policy{AllowSimulation: true}}
	expect.Verify.SimKeys = []*ecdsa.PublicKey{castest.SimKey(t, dir)}
	c, _, err := casclient.NewAttested(ctx, url, expect, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := policy.NewKey()
	if _, err := c.Init(ctx, []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, filepath.Dir(caFile)), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	owner, _ := policy.NewKey()
	key := strings.ReplaceAll(string(policy.MarshalPublicKey(&owner.PublicKey)), "\n", `\n`)
	var remembered []byte
	for v := 1; v <= 2; v++ {
		doc := fmt.Sprintf("version: cloister.dev/policy/v1\nname: shop\nread: any\nowners: {keys: [\"%s\"]}\nservices:\n- {name: web, attestation: {identities: [{type: sgx, mrenclave: \"%s\"}]}, certificate: {sans: [web.%d.svc]}}\n",
			key, strings.Repeat("11", 32), v)
		link, err := c.LinkFor(ctx, "shop", mustParse(t, doc).Digest())
		if err != nil {
			t.Fatal(err)
		}
		s := &policy.Signed{Policy: doc, Link: link}
		signers := []*ecdsa.PrivateKey{owner}
		if v == 1 {
			signers = append(signers, castest.BoardKey())
		}
		for _, k := range signers {
			if err := policy.Sign(s, k); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.RegisterPolicy(ctx, wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}); err != nil {
			t.Fatal(err)
		}
		if v == 1 {
			if remembered, err = c.LogCheckpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	h, err := c.History(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	b, err := audit.Build(ctx, c, expect, "shop", h.Records, remembered)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw, expect
}

func mustParse(t *testing.T, doc string) *policy.Document {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func failed(claims []audit.Claim) []string {
	var out []string
	for _, c := range claims {
		if c.Err != nil {
			out = append(out, c.Name)
		}
	}
	return out
}

// A bundle written from a real CAS holds every claim offline, and fails
// one, named, for a change of any one of its bytes.
func TestEveryByteOfABundleIsChecked(t *testing.T) {
	raw, expect := bundleOf(t)
	b, err := audit.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	claims := audit.Check(b, audit.Options{Expect: expect})
	if f := failed(claims); len(f) > 0 {
		t.Fatalf("the bundle as written fails %v: %+v", f, claims)
	}
	names := map[string]bool{}
	for _, c := range claims {
		names[c.Name] = true
	}
	for _, want := range []string{"cas-statement", "manifest-history", "checkpoint", "log-inclusion v1", "log-inclusion v2", "consistency"} {
		if !names[want] {
			t.Errorf("no claim %q", want)
		}
	}
	step := 1
	if testing.Short() {
		step = 7
	}
	seen := map[string]int{}
	for i := 0; i < len(raw); i += step {
		changed := append([]byte(nil), raw...)
		changed[i] ^= 0x01
		b, err := audit.Parse(changed)
		if err != nil {
			seen["bundle"]++
			continue
		}
		f := failed(audit.Check(b, audit.Options{Expect: expect}))
		if len(f) == 0 {
			t.Fatalf("byte %d changed (%q for %q) and every claim holds: %q", i, changed[i], raw[i], raw[max(0, i-40):min(len(raw), i+40)])
		}
		seen[f[0]]++
	}
	t.Logf("%d bytes; first failing claim per change: %v", len(raw), seen)

	// Another CAS's evidence key.
	other := expect
	other.Verify.SimKeys = []*ecdsa.PublicKey{&castest.LASKey().PublicKey}
	if f := failed(audit.Check(b, audit.Options{Expect: other})); len(f) == 0 || f[0] != "cas-statement" {
		t.Errorf("another CAS's simulation key: %v", f)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"type":"` + audit.Type + `","manifest":"shop","records":null,"nonce":null,"cas":{"statement":null,"signature":null,"tlsCertificate":""},"proofs":null}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := audit.Parse(data)
		if err != nil {
			return
		}
		again, err := b.Marshal()
		if err != nil || string(again) != string(data) {
			t.Fatalf("a bundle that does not read back: %v", err)
		}
		_ = audit.Check(b, audit.Options{})
	})
}
