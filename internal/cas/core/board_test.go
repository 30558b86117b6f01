package core

import (
	"crypto/ecdsa"
	"errors"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// A new name needs the board: its owners alone, or a stranger who makes
// himself the owner, are refused by name; a board key's signature makes
// it; an owner-less name takes the board's signature and no other. A
// board given at init replaces the recovery owners.
func TestNewNamesNeedTheBoard(t *testing.T) {
	f := newFixture(t, NoSealer{}, 1, 1)
	stranger, _ := policy.NewKey()
	mine := strings.Replace(f.policyText(""), indent(string(policy.MarshalPublicKey(&f.owner.PublicKey))), indent(string(policy.MarshalPublicKey(&stranger.PublicKey))), 1)
	for _, tc := range []struct {
		what    string
		text    string
		signers []*ecdsa.PrivateKey
		want    string
	}{
		{"its owner alone", f.policyText(""), []*ecdsa.PrivateKey{f.owner}, "is a new name, so its version 1 needs the signature of a board key"},
		{"a stranger's own policy under the name", mine, []*ecdsa.PrivateKey{stranger}, "is a new name"},
		{"the board alone, without the owner", f.policyText(""), []*ecdsa.PrivateKey{f.rec[0]}, "signed by 0 of its owners, 1 needed"},
	} {
		if _, err := f.registerAt(tc.text, policy.Link{Version: 1}, tc.signers...); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.what, err, tc.want)
		}
	}
	if _, err := f.cas.Policy("shop"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused name was stored: %v", err)
	}
	if _, err := f.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, f.rec[0]); err != nil {
		t.Fatalf("owner and board: %v", err)
	}
	board, err := f.cas.Board()
	if err != nil || len(board) != 1 || board[0] != policy.Fingerprint(&f.rec[0].PublicKey) {
		t.Errorf("the board %v (%v), want the recovery owner", board, err)
	}

	frozen := strings.Replace(strings.Replace(f.policyText(""), "name: shop", "name: frozen", 1),
		"  keys:\n  - |\n"+indent(string(policy.MarshalPublicKey(&f.owner.PublicKey)))+"\n", "  keys: []\n", 1)
	frozen = strings.NewReplacer("api.shop.svc, 10.1.2.3", "api.frozen.svc", "worker.shop.svc", "worker.frozen.svc").Replace(frozen)
	for _, signers := range [][]*ecdsa.PrivateKey{nil, {stranger}, {f.rec[0], stranger}} {
		if _, err := f.registerAt(frozen, policy.Link{Version: 1}, signers...); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("an owner-less name signed by %d keys: %v", len(signers), err)
		}
	}
	if _, err := f.registerAt(frozen, policy.Link{Version: 1}, f.rec[0]); err != nil {
		t.Errorf("an owner-less name the board approved: %v", err)
	}

	// A board of its own at init: the recovery owner approves nothing.
	g := &fixture{t: t, dir: t.TempDir(), lasKey: f.lasKey}
	g.open(NoSealer{})
	rec, _ := policy.NewKey()
	boardKey, _ := policy.NewKey()
	if _, err := g.cas.Init([]*ecdsa.PublicKey{&rec.PublicKey}, 1, testToken, &boardKey.PublicKey); err != nil {
		t.Fatal(err)
	}
	g.owner = f.owner
	if _, err := g.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, rec); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("the recovery owner under a board of its own: %v", err)
	}
	if _, err := g.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, boardKey); err != nil {
		t.Errorf("the board given at init: %v", err)
	}
}

// A namespace's policy holds it: once the board approved the namespace,
// its owners approve the names in it (team/shop), and nobody else does;
// a name in a namespace nobody holds still needs the board.
func TestNamespaceOwnersApproveItsNames(t *testing.T) {
	f := newFixture(t, NoSealer{}, 1, 1)
	teamOwner, _ := policy.NewKey()
	stranger, _ := policy.NewKey()
	team := "version: cloister.dev/policy/v1\nname: team\nowners:\n  keys:\n  - |\n" +
		indent(string(policy.MarshalPublicKey(&teamOwner.PublicKey))) + "\nservices: []\n"
	if _, err := f.registerAt(team, policy.Link{Version: 1}, teamOwner); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("a namespace the board did not approve: %v", err)
	}
	if _, err := f.registerAt(team, policy.Link{Version: 1}, teamOwner, f.rec[0]); err != nil {
		t.Fatalf("the namespace with the board's approval: %v", err)
	}
	shop := strings.Replace(f.policyText(""), "name: shop", "name: team/shop", 1)
	for _, tc := range []struct {
		what    string
		signers []*ecdsa.PrivateKey
		want    string
	}{
		{"its owner alone", []*ecdsa.PrivateKey{f.owner}, "is a new name in namespace team, so its version 1 needs the signatures of 1 of the owners of policy team (it has 0)"},
		{"its owner and a stranger", []*ecdsa.PrivateKey{f.owner, stranger}, "is not among the keys that may approve version 1"},
	} {
		if _, err := f.registerAt(shop, policy.Link{Version: 1}, tc.signers...); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.what, err, tc.want)
		}
	}
	if _, err := f.registerAt(shop, policy.Link{Version: 1}, f.owner, teamOwner); err != nil {
		t.Fatalf("approved by the namespace's owner: %v", err)
	}
	if _, err := f.cas.Policy("team/shop"); err != nil {
		t.Fatal(err)
	}

	// Nobody holds namespace other: its owner is nobody's approver, the
	// board still is.
	other := strings.NewReplacer("name: shop", "name: other/shop", "api.shop.svc, 10.1.2.3", "api.other.svc", "worker.shop.svc", "worker.other.svc").Replace(f.policyText(""))
	if _, err := f.registerAt(other, policy.Link{Version: 1}, f.owner, teamOwner); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("another namespace's name approved by team's owner: %v", err)
	}
	if _, err := f.registerAt(other, policy.Link{Version: 1}, f.owner); err == nil || !strings.Contains(err.Error(), "or the owners of policy other once the board has approved that namespace") {
		t.Errorf("a name in a namespace nobody holds: %v", err)
	}
	if _, err := f.registerAt(other, policy.Link{Version: 1}, f.owner, f.rec[0]); err != nil {
		t.Errorf("the board approves a name in any namespace: %v", err)
	}
}
