package core

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// A new name needs the board: its owners alone, or a stranger who makes
// himself the owner, are refused by name; a board key's signature makes
// it; an owner-less name takes the board's signature and no other. A
// board given at init replaces the recovery owners.
func TestNewNamesNeedTheBoard(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	stranger, _ := policy.NewKey()
	mine := strings.Replace(f.policyText(""), indent(string(policy.MarshalPublicKey(&f.owner.PublicKey))), indent(string(policy.MarshalPublicKey(&stranger.PublicKey))), 1)
	for _, tc := range []struct {
		what    string
		text    string
		signers []*ecdsa.PrivateKey
		want    string
	}{
		{"its owner alone", f.policyText(""), []*ecdsa.PrivateKey{f.owner}, "is a new name, so its version 1 needs the signatures of 1 of the 1 board keys of this CAS besides its owners' (it has 0)"},
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
	if err != nil || len(board.Keys) != 1 || board.Keys[0] != policy.Fingerprint(&f.rec[0].PublicKey) || board.Threshold != 1 {
		t.Errorf("the board %+v (%v), want the recovery owner", board, err)
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
	g.open(seal.NoSealer{})
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
	f := newFixture(t, seal.NoSealer{}, 1, 1)
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

// boardChange is the change to keys at version, a majority of them
// approving, signed by members for this CAS, as cloister cas board makes
// it.
func (f *fixture) boardChange(version int, keys []*ecdsa.PublicKey, members ...*ecdsa.PrivateKey) *wire.BoardChange {
	return f.boardChangeAt(version, keys, 0, members...)
}

// boardChangeAt is boardChange with threshold of keys approving (0: a
// majority).
func (f *fixture) boardChangeAt(version int, keys []*ecdsa.PublicKey, threshold int, members ...*ecdsa.PrivateKey) *wire.BoardChange {
	f.t.Helper()
	enc, err := f.cas.EncryptionKey()
	if err != nil {
		f.t.Fatal(err)
	}
	req := &wire.BoardChange{Version: version, Threshold: threshold}
	var fps []string
	for _, k := range keys {
		req.Keys = append(req.Keys, string(policy.MarshalPublicKey(k)))
		fps = append(fps, policy.Fingerprint(k))
	}
	for _, m := range members {
		sig, err := ecdsa.SignASN1(rand.Reader, m, wire.BoardDigest(enc, version, wire.BoardThreshold(threshold, len(keys)), fps))
		if err != nil {
			f.t.Fatal(err)
		}
		req.Signatures = append(req.Signatures, policy.Signature{Signer: policy.Fingerprint(&m.PublicKey), Signature: base64.StdEncoding.EncodeToString(sig)})
	}
	return req
}

// The board is changed by a majority of itself, for its next version of
// this CAS only: a minority, a stranger, a change signed for another
// version or another CAS, and the accepted change replayed are refused
// and leave the board as it was; the new board approves new names, the
// old one no longer does, and the change survives a restart.
func TestBoardChangedByItsMajority(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	f := newFixture(t, sealer, 1, 3) // the board: the three recovery owners
	next, _ := policy.NewKey()
	stranger, _ := policy.NewKey()
	nextKeys := []*ecdsa.PublicKey{&next.PublicKey}
	otherCAS := newFixture(t, seal.NoSealer{}, 1, 1)
	otherCAS.rec = f.rec
	for _, tc := range []struct {
		what string
		req  *wire.BoardChange
		want error
	}{
		{"one of three", f.boardChange(1, nextKeys, f.rec[0]), ErrUnauthorized},
		{"a stranger with one member", f.boardChange(1, nextKeys, f.rec[0], stranger), ErrUnauthorized},
		{"one member twice", f.boardChange(1, nextKeys, f.rec[0], f.rec[0]), ErrUnauthorized},
		{"for version 2", f.boardChange(2, nextKeys, f.rec[0], f.rec[1]), ErrConflict},
		{"for version 0", f.boardChange(0, nextKeys, f.rec[0], f.rec[1]), ErrConflict},
		{"for another CAS", otherCAS.boardChange(1, nextKeys, f.rec[0], f.rec[1]), ErrUnauthorized},
		{"no keys", f.boardChange(1, nil, f.rec[0], f.rec[1]), ErrInvalid},
		{"a key twice", f.boardChange(1, []*ecdsa.PublicKey{&next.PublicKey, &next.PublicKey}, f.rec[0], f.rec[1]), ErrInvalid},
	} {
		if _, err := f.cas.ChangeBoard(tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
		if board, _ := f.cas.Board(); len(board.Keys) != 3 || board.Version != 0 {
			t.Fatalf("%s changed the board: %+v", tc.what, board)
		}
	}
	change := f.boardChange(1, nextKeys, f.rec[2], f.rec[0])
	if got, err := f.cas.ChangeBoard(change); err != nil || len(got.Keys) != 1 || got.Keys[0] != policy.Fingerprint(&next.PublicKey) {
		t.Fatalf("a majority's change: %+v %v", got, err)
	}
	if _, err := f.cas.ChangeBoard(change); !errors.Is(err, ErrConflict) {
		t.Errorf("the change replayed: %v", err)
	}
	if _, err := f.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, f.rec[0]); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a new name approved by the old board: %v", err)
	}
	f.open(sealer)
	if board, err := f.cas.Board(); err != nil || len(board.Keys) != 1 || board.Keys[0] != policy.Fingerprint(&next.PublicKey) || board.Version != 1 {
		t.Fatalf("after a restart the board is %+v (%v)", board, err)
	}
	if _, err := f.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, next); err != nil {
		t.Errorf("a new name approved by the new board: %v", err)
	}
	// One member of a board of one is its majority.
	if _, err := f.cas.ChangeBoard(f.boardChange(2, []*ecdsa.PublicKey{&f.rec[0].PublicKey}, next)); err != nil {
		t.Errorf("a board of one changed by its member: %v", err)
	}
	// The transparency log: the init, each board change, each version.
	var types []string
	for _, e := range logEntries(t, f.cas) {
		types = append(types, fmt.Sprintf("%s%d", e.Type, e.Version))
	}
	if want := []string{"init0", "board1", "policy1", "board2"}; !slices.Equal(types, want) {
		t.Errorf("the log's entries %v, want %v", types, want)
	}
}

// A board of three with threshold 2, given at init: one member's approval
// of a new name or of a wildcard is refused, two make it. A change to the
// board needs its threshold and a majority, and sets the next threshold,
// which the change's signatures cover.
func TestBoardThreshold(t *testing.T) {
	f := &fixture{t: t, dir: t.TempDir()}
	f.lasKey, _ = policy.NewKey()
	f.open(seal.NoSealer{})
	rec, _ := policy.NewKey()
	f.rec = []*ecdsa.PrivateKey{rec}
	var members []*ecdsa.PrivateKey
	var board []*ecdsa.PublicKey
	for range 3 {
		m, _ := policy.NewKey()
		members, board = append(members, m), append(board, &m.PublicKey)
	}
	if _, err := f.cas.InitWith(InitRequest{Owners: []*ecdsa.PublicKey{&rec.PublicKey}, Threshold: 1, Token: testToken, Board: board, BoardThreshold: 4}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "threshold 4, want 1..3") {
		t.Fatalf("a threshold above the board's keys: %v", err)
	}
	if _, err := f.cas.InitWith(InitRequest{Owners: []*ecdsa.PublicKey{&rec.PublicKey}, Threshold: 1, Token: testToken, Board: board, BoardThreshold: 2}); err != nil {
		t.Fatal(err)
	}
	f.owner, _ = policy.NewKey()
	if info, err := f.cas.Board(); err != nil || info.Threshold != 2 || len(info.Keys) != 3 {
		t.Fatalf("the board: %+v %v", info, err)
	}
	if _, err := f.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, members[1]); !errors.Is(err, ErrUnauthorized) ||
		!strings.Contains(err.Error(), "needs the signatures of 2 of the 3 board keys of this CAS besides its owners' (it has 1)") {
		t.Errorf("one member of three approving a name: %v", err)
	}
	if _, err := f.registerAt(f.policyText(""), policy.Link{Version: 1}, f.owner, members[1], members[2]); err != nil {
		t.Fatalf("two members of three: %v", err)
	}
	wild := strings.Replace(f.policyText(""), "sans: [worker.shop.svc]", `sans: ["*.worker.shop.svc"]`, 1)
	if _, err := f.registerAt(wild, f.next(wild), f.owner, members[0]); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is a wildcard") {
		t.Errorf("one member of three allowing a wildcard: %v", err)
	}
	if _, err := f.registerAt(wild, f.next(wild), f.owner, members[0], members[2]); err != nil {
		t.Errorf("two members allowing a wildcard: %v", err)
	}

	// To threshold 3 of the same keys: the signatures cover the
	// threshold, so a change signed for another one is refused.
	forged := f.boardChangeAt(1, board, 1, members[0], members[1])
	forged.Threshold = 3
	if _, err := f.cas.ChangeBoard(forged); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a change whose threshold was altered after signing: %v", err)
	}
	if _, err := f.cas.ChangeBoard(f.boardChangeAt(1, board, 3, members[0])); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a change signed by one of three: %v", err)
	}
	if got, err := f.cas.ChangeBoard(f.boardChangeAt(1, board, 3, members[0], members[1])); err != nil || got.Threshold != 3 {
		t.Fatalf("two of three raising the threshold: %+v %v", got, err)
	}
	other := strings.NewReplacer("name: shop", "name: ledger", "api.shop.svc, 10.1.2.3", "api.ledger.svc", "worker.shop.svc", "worker.ledger.svc").Replace(f.policyText(""))
	if _, err := f.registerAt(other, policy.Link{Version: 1}, f.owner, members[0], members[1]); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("two of three under threshold 3: %v", err)
	}
	if _, err := f.registerAt(other, policy.Link{Version: 1}, f.owner, members[0], members[1], members[2]); err != nil {
		t.Errorf("all three: %v", err)
	}
}

// Whatever a request to change the board holds, it makes no board unless
// a majority of the current board signed it: no input forges one.
func FuzzChangeBoard(f *testing.F) {
	member, _ := policy.NewKey()
	current := boardState{keys: []*ecdsa.PublicKey{&member.PublicKey}, threshold: 1}
	f.Add([]byte(`{"version":1,"keys":["x"],"signatures":[{"signer":"` + policy.Fingerprint(&member.PublicKey) + `","signature":"AA=="}]}`))
	f.Add([]byte(`{"version":1,"keys":[],"signatures":[]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req wire.BoardChange
		if err := strictjson.Decode(bytes.NewReader(raw), &req); err != nil {
			return
		}
		if next, _, err := checkBoardChange(current, "cas", &req); err == nil {
			t.Fatalf("%s made the board %+v", raw, next)
		}
	})
}
