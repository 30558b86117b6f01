package witness

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fwitness "github.com/transparency-dev/formats/witness"
	"golang.org/x/mod/sumdb/note"
	sumtlog "golang.org/x/mod/sumdb/tlog"

	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
)

// testLog is a Cloister log in a real store, signed as CAS signs it.
type testLog struct {
	t      *testing.T
	s      store.Store
	signer note.Signer
	vkey   string
	origin string
}

func newTestLog(t *testing.T, key ed25519.PrivateKey) *testLog {
	t.Helper()
	s, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const name = "cas-0123.cloister"
	vkey, err := tlog.VerifierKey(name, key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return &testLog{t: t, s: s, signer: tlog.NewSigner(name, key), vkey: vkey, origin: tlog.Origin(name)}
}

// grow appends entries named by prefix until the log has size entries,
// and returns its signed checkpoint.
func (l *testLog) grow(size int, prefix string) []byte {
	l.t.Helper()
	var cp []byte
	err := l.s.Update(func(tx store.Tx) error {
		n, err := tlog.Size(tx)
		for ; err == nil && n < int64(size); n++ {
			_, err = tlog.Append(tx, fmt.Appendf(nil, "%s %d", prefix, n))
		}
		if err == nil {
			cp, err = tlog.Sign(tx, l.origin, l.signer)
		}
		return err
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return cp
}

func (l *testLog) proof(size int64) func(int64) (sumtlog.TreeProof, error) {
	return func(old int64) (p sumtlog.TreeProof, err error) {
		err = l.s.View(func(tx store.Tx) error { p, err = tlog.ProveConsistency(tx, size, old); return err })
		return p, err
	}
}

type testWitness struct {
	dir  string
	vkey string
	url  string
	ep   Endpoint
}

func startWitness(t *testing.T, dir string, logs ...string) testWitness {
	t.Helper()
	signer, vkey, err := Key(dir, "witness-a.example")
	if err != nil {
		t.Fatal(err)
	}
	var known []Log
	for _, k := range logs {
		l, err := ParseLog(k)
		if err != nil {
			t.Fatal(err)
		}
		known = append(known, l)
	}
	w, err := New(dir, signer, known, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	v, err := NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return testWitness{dir: dir, vkey: vkey, url: srv.URL, ep: Endpoint{URL: srv.URL, Verifier: v}}
}

func refusal(err error) int {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Status
	}
	return 0
}

// A witness cosigns a log's first checkpoint and each that extends the
// one it holds, across its own restart; transparency-dev's witness
// policy (an implementation of its own) takes the cosignatures.
func TestWitnessCosignsWhatExtends(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	l := newTestLog(t, key)
	dir := t.TempDir()
	w := startWitness(t, dir, l.vkey)
	ctx := context.Background()
	hc := http.DefaultClient

	u, _ := url.Parse(w.url)
	independent, err := fwitness.New(w.vkey, u)
	if err != nil {
		t.Fatal(err)
	}
	cp3 := l.grow(3, "v")
	sig, held, err := Cosign(ctx, hc, w.ep, cp3, 0, 3, l.proof(3))
	if err != nil || held != 3 {
		t.Fatalf("first checkpoint: %v (held %d)", err, held)
	}
	if !independent.Satisfied(append(bytes.Clone(cp3), sig...)) {
		t.Fatalf("transparency-dev's witness policy refuses the cosignature:\n%s%s", cp3, sig)
	}
	if independent.Satisfied(cp3) {
		t.Fatal("a checkpoint without the cosignature satisfies the policy")
	}

	// Restarted, it still holds 3; a log that thinks it holds 0 learns 3.
	w = startWitness(t, dir, l.vkey)
	cp300 := l.grow(300, "v")
	if _, held, err = Cosign(ctx, hc, w.ep, cp300, 0, 300, l.proof(300)); err != nil || held != 300 {
		t.Fatalf("300 from a log that thought 0 was held: %v", err)
	}
	// The same checkpoint again is cosigned again.
	if _, _, err = Cosign(ctx, hc, w.ep, cp300, 300, 300, l.proof(300)); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
	if _, _, err := Key(dir, "witness-b.example"); err == nil {
		t.Error("a witness key taken under another name")
	}
}

// A rolled-back log, a fork of the same size or larger, an unknown log
// and a checkpoint another key signed get no cosignature; a fork's two
// checkpoints are kept.
func TestWitnessRefusesForksAndRollbacks(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	honest, fork := newTestLog(t, key), newTestLog(t, key)
	dir := t.TempDir()
	w := startWitness(t, dir, honest.vkey)
	ctx, hc := context.Background(), http.DefaultClient

	if _, _, err := Cosign(ctx, hc, w.ep, honest.grow(10, "v"), 0, 10, honest.proof(10)); err != nil {
		t.Fatal(err)
	}
	// Rolled back to 5: the witness holds 10.
	back := newTestLog(t, key)
	_, _, err := Cosign(ctx, hc, w.ep, back.grow(5, "v"), 5, 5, back.proof(5))
	if refusal(err) != http.StatusConflict {
		t.Errorf("a rolled-back log: want 409, got %v", err)
	}
	// Another history of the same size: 409, of a larger size: 422.
	_, _, err = Cosign(ctx, hc, w.ep, fork.grow(10, "other"), 10, 10, fork.proof(10))
	if refusal(err) != http.StatusConflict {
		t.Errorf("a fork of the same size: want 409, got %v", err)
	}
	_, _, err = Cosign(ctx, hc, w.ep, fork.grow(12, "other"), 10, 12, fork.proof(12))
	if refusal(err) != http.StatusUnprocessableEntity {
		t.Errorf("a fork of a larger size: want 422, got %v", err)
	}
	conflicts, _ := os.ReadDir(filepath.Join(dir, conflictDir))
	if len(conflicts) != 2 {
		t.Errorf("want the 2 forks' checkpoints kept, got %d files", len(conflicts))
	}
	// The honest log goes on.
	if _, _, err := Cosign(ctx, hc, w.ep, honest.grow(11, "v"), 10, 11, honest.proof(11)); err != nil {
		t.Errorf("the honest log after the fork: %v", err)
	}
	// Another log, another key.
	_, k2, _ := ed25519.GenerateKey(rand.Reader)
	other := newTestLog(t, k2)
	if _, err := Ask(ctx, hc, w.ep, Request{Checkpoint: other.grow(1, "v")}); refusal(err) != http.StatusForbidden {
		t.Errorf("a checkpoint another key signed: want 403, got %v", err)
	}
	unknown := newTestLog(t, k2)
	unknown.origin = "elsewhere.example/log"
	if _, err := Ask(ctx, hc, w.ep, Request{Checkpoint: unknown.grow(1, "v")}); refusal(err) != http.StatusNotFound {
		t.Errorf("an unknown log: want 404, got %v", err)
	}
	// A proof where none is due.
	cp := honest.grow(11, "v")
	if _, err := Ask(ctx, hc, w.ep, Request{OldSize: 11, Proof: sumtlog.TreeProof{{}}, Checkpoint: cp}); refusal(err) != http.StatusBadRequest {
		t.Errorf("a proof where none is due: want 400, got %v", err)
	}
}

// A witness that answers with another key's signature is not taken.
func TestAskChecksTheCosignature(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	l := newTestLog(t, key)
	w := startWitness(t, t.TempDir(), l.vkey)
	impostor := startWitness(t, t.TempDir(), l.vkey)
	ep := Endpoint{URL: impostor.url, Verifier: w.ep.Verifier}
	if _, err := Ask(context.Background(), http.DefaultClient, ep, Request{Checkpoint: l.grow(1, "v")}); err == nil || !strings.Contains(err.Error(), "no valid cosignature") {
		t.Errorf("another witness's cosignature taken: %v", err)
	}
}

func TestParseRequest(t *testing.T) {
	h := sumtlog.Hash{1, 2, 3}
	r := Request{OldSize: 7, Proof: sumtlog.TreeProof{h, h}, Checkpoint: []byte("o\n9\nAAAA\n\n— k sig\n")}
	got, err := ParseRequest(r.Marshal())
	if err != nil || got.OldSize != 7 || len(got.Proof) != 2 || got.Proof[1] != h || !bytes.Equal(got.Checkpoint, r.Checkpoint) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{
		"old 7\no\n9\n",           // no empty line
		"old -1\n\ncp",            // negative
		"old 07\n\ncp",            // leading zero
		"new 7\n\ncp",             // keyword
		"old 7\nnot-base64\n\ncp", // hash
		"old 7\nAAAA\n\ncp",       // short hash
		"old 7\n\n",               // no checkpoint
		strings.Repeat("x", MaxRequest+1),
	} {
		if _, err := ParseRequest([]byte(bad)); err == nil {
			t.Errorf("%.40q accepted", bad)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(Request{OldSize: 3, Proof: sumtlog.TreeProof{{1}}, Checkpoint: []byte("o\n9\nAAAA\n\n— k sig\n")}.Marshal())
	f.Add([]byte("old 0\n\nx"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRequest(data)
		if err != nil {
			return
		}
		again, err := ParseRequest(r.Marshal())
		if err != nil || again.OldSize != r.OldSize || len(again.Proof) != len(r.Proof) || !bytes.Equal(again.Checkpoint, r.Checkpoint) {
			t.Fatalf("%+v does not read back: %v", r, err)
		}
	})
}

// A witness policy, and the cosignatures of a checkpoint checked against
// it, from anyone's input.
func FuzzParsePolicy(f *testing.F) {
	_, vkey, err := Key(f.TempDir(), "witness.example")
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("witness w "+vkey+" https://w.example\ngroup g 1 w\nquorum g\n"), []byte("o\n1\nAAAA\n\n— witness.example AAAA\n"))
	f.Add([]byte("quorum none\n"), []byte(""))
	f.Fuzz(func(t *testing.T, policy, checkpoint []byte) {
		p, err := ParsePolicy(policy)
		if err != nil {
			return
		}
		if p.SatisfiedSince(checkpoint, time.Unix(0, 0)) && !p.Satisfied(checkpoint) {
			t.Fatal("satisfied by recent cosignatures, not by all")
		}
	})
}
