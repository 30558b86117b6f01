package core

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Owners sign each version's place in the chain: a version CAS has passed
// cannot be submitted again by anyone, a stranger's copy of the current
// version is refused rather than "unchanged", and an old document comes
// back only when the owners sign it again as the next version.
func TestPolicyChainRefusesReplay(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	v1text := f.policyText("")
	v2text := strings.Replace(v1text, "validity: 2h", "validity: 3h", 1)
	if _, err := f.register(v1text, f.owner); err != nil {
		t.Fatal(err)
	}
	v1, _ := f.cas.Policy("shop")
	if _, err := f.register(v2text, f.owner); err != nil {
		t.Fatal(err)
	}
	v2, _ := f.cas.Policy("shop")
	if v2.Version != 2 || v2.Predecessor != v1.Digest {
		t.Fatalf("v2 %d after %q, want 2 after %s", v2.Version, v2.Predecessor, v1.Digest)
	}
	stranger, _ := policy.NewKey()
	d1, _ := policy.Parse([]byte(v1text))
	for _, tc := range []struct {
		what    string
		text    string
		link    policy.Link
		signers []*ecdsa.PrivateKey
		want    error
		msg     string
	}{
		{"v1 replayed as signed", v1text, policy.Link{Version: 1}, []*ecdsa.PrivateKey{f.owner, f.rec[0]}, ErrSuperseded, "version 1 was replaced by version 2"},
		{"v1's signature claimed for version 3", v1text, policy.Link{Version: 3, Predecessor: v2.Digest}, nil, ErrUnauthorized, "does not verify over this policy as version 3"},
		{"stranger's copy of v2", v2text, policy.Link{Version: 2, Predecessor: v1.Digest}, []*ecdsa.PrivateKey{stranger}, ErrUnauthorized, "is not among the keys that may approve version 2"},
		{"owner and stranger on v2", v2text, policy.Link{Version: 2, Predecessor: v1.Digest}, []*ecdsa.PrivateKey{f.owner, stranger}, ErrUnauthorized, "not among the keys"},
		{"a version skipped", v1text, policy.Link{Version: 5, Predecessor: v2.Digest}, []*ecdsa.PrivateKey{f.owner}, ErrConflict, "sign it as version 3 after " + v2.Digest},
		{"after a stale predecessor", v1text, policy.Link{Version: 3, Predecessor: d1.Digest()}, []*ecdsa.PrivateKey{f.owner}, ErrConflict, "CAS's version 2 is " + v2.Digest},
		{"another document as version 2", strings.Replace(v1text, "validity: 2h", "validity: 4h", 1), policy.Link{Version: 2, Predecessor: v1.Digest}, []*ecdsa.PrivateKey{f.owner}, ErrConflict, "CAS's version 2 of policy shop is another document"},
	} {
		s := &policy.Signed{Policy: tc.text, Link: tc.link}
		for _, k := range tc.signers {
			if err := policy.Sign(s, k); err != nil {
				t.Fatal(err)
			}
		}
		if tc.what == "v1's signature claimed for version 3" {
			s.Signatures = v1.Signatures
		}
		_, err := f.cas.Register(s)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v saying %q", tc.what, err, tc.want, tc.msg)
		}
		if cur, _ := f.cas.Policy("shop"); cur.Version != 2 || cur.Digest != v2.Digest {
			t.Fatalf("%s changed the current version to %d (%s)", tc.what, cur.Version, cur.Digest)
		}
	}
	// The owner's signature over the current version at its own place:
	// unchanged, with its link.
	if r, err := f.registerAt(v2text, policy.Link{Version: 2, Predecessor: v1.Digest}, f.owner); err != nil || !r.Unchanged || r.Predecessor != v1.Digest {
		t.Errorf("the current version again: %+v %v", r, err)
	}
	// Back to v1's content: only as version 3, signed again.
	if r, err := f.register(v1text, f.owner); err != nil || r.Version != 3 || r.Predecessor != v2.Digest {
		t.Fatalf("v1's content signed as version 3: %+v %v", r, err)
	}
}

// A read challenge is accepted until it expires, and only by the CAS that
// made it (one with the same seed).
func TestReadChallenge(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	clk := testingclock.NewFakeClock(time.Now())
	f.cas.cfg.Clock = clk
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	ch, err := f.cas.Challenge()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := wire.SignRead(f.owner, "shop", ch.Challenge)
	if h, err := f.cas.OwnerHistory("shop", req); err != nil || len(h) != 1 || h[0].Policy == "" {
		t.Fatalf("a fresh challenge: %v", err)
	}
	// Signed for another policy name: refused.
	other, _ := wire.SignRead(f.owner, "other", ch.Challenge)
	if _, err := f.cas.OwnerHistory("shop", other); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "signature: does not verify") {
		t.Errorf("a signature for another name: %v", err)
	}
	clk.Step(ChallengeTTL)
	if _, err := f.cas.OwnerHistory("shop", req); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "challenge: expired") {
		t.Errorf("an expired challenge: %v", err)
	}
	// Another CAS's challenge (another seed).
	g := newFixture(t, seal.NoSealer{}, 1, 1)
	foreign, _ := g.cas.Challenge()
	req, _ = wire.SignRead(f.owner, "shop", foreign.Challenge)
	clk.SetTime(time.Now())
	if _, err := f.cas.OwnerHistory("shop", req); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "not one this CAS made") {
		t.Errorf("another CAS's challenge: %v", err)
	}
}

type pinned []*ecdsa.PublicKey

func (p pinned) Keys() ([]*ecdsa.PublicKey, error) { return p, nil }

// A CAS that pins simulation keys takes simulated evidence signed by them
// only: a pod that signs its own quote, claiming any identity, is refused
// by name; a CAS that pins none (not configured, or an empty set) takes
// no simulated evidence at all.
func TestPinnedSimulationKeys(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	f.cas.cfg.SimKeys = pinned{&f.lasKey.PublicKey}
	if _, err := f.attest(f.request("api", nil)); err != nil {
		t.Fatalf("evidence from the pinned LAS key: %v", err)
	}
	las := f.lasKey
	f.lasKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader) // a pod's own key
	_, err := f.cas.Attest(f.request("api", nil))
	if !errors.Is(err, ErrRejected) || attest.CheckOf(err) != attest.CheckChain || !strings.Contains(err.Error(), "which is not pinned: a forged quote") {
		t.Errorf("a forged simulated quote: %v", err)
	}
	f.lasKey = las
	for name, keys := range map[string]SimKeys{"an empty set": pinned{}, "none at all": nil} {
		f.cas.cfg.SimKeys = keys
		if _, err := f.cas.Attest(f.request("api", nil)); attest.CheckOf(err) != attest.CheckChain || !strings.Contains(err.Error(), "pins no simulation keys") {
			t.Errorf("a CAS that pins %s: %v", name, err)
		}
	}
}
