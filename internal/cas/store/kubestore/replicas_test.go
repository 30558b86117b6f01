package kubestore

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// replicas are CAS replicas on one state on the API, sharing the seed
// through a file sealer (as peer recovery would hand it over).
type replicas struct {
	t      *testing.T
	c      client.WithWatch
	ns     string
	sealer seal.Sealer
	owner  *ecdsa.PrivateKey // recovery owner, board and policy owner
}

func newReplicas(t *testing.T) *replicas {
	t.Helper()
	c := newClient(t)
	owner, err := policy.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return &replicas{t: t, c: c, ns: namespace(t, c), sealer: seal.FileSealer{Path: filepath.Join(t.TempDir(), "seed")}, owner: owner}
}

const token = "replicas-init-token"

// gated runs hooks around each commit (one-shot: a test sets them
// again), so that a test orders the commits of replicas that decided on
// the same state.
type gated struct {
	*Store
	before, after *func()
}

func (g gated) Update(fn func(store.Tx) error) error {
	if f := *g.before; f != nil {
		*g.before = nil
		f()
	}
	err := g.Store.Update(fn)
	if f := *g.after; f != nil {
		*g.after = nil
		f()
	}
	return err
}

// start opens one more replica, committing through hooks; the first one
// inits CAS.
func (r *replicas) start(before, after *func()) *core.CAS {
	r.t.Helper()
	s := gated{open(r.t, r.c, r.ns), before, after}
	// Other replicas' commits come in as they happen too, concurrently
	// with this replica's own decisions (the race detector watches).
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	go s.Watch(ctx, time.Hour)
	c, err := core.Open(core.Config{Store: s, Sealer: r.sealer, InitToken: core.FixedToken(token), AllowSimulation: true})
	if err != nil {
		r.t.Fatal(err)
	}
	if st, _ := c.Status(); st == wire.Uninitialized {
		if _, err := c.Init([]*ecdsa.PublicKey{&r.owner.PublicKey}, 1, token); err != nil {
			r.t.Fatal(err)
		}
	}
	if st, why := c.Status(); st != wire.Ready {
		r.t.Fatalf("replica: %s %s", st, why)
	}
	return c
}

func (r *replicas) text(validity string) string {
	return `version: cloister.dev/policy/v1
name: shop
owners:
  keys:
  - |
    ` + strings.ReplaceAll(strings.TrimSpace(string(policy.MarshalPublicKey(&r.owner.PublicKey))), "\n", "\n    ") + `
allowSimulation: true
services:
- name: api
  attestation: {identities: [{type: sgx, mrenclave: "` + strings.Repeat("ab", 32) + `"}]}
  certificate: {sans: [api.shop.svc], validity: ` + validity + `}
  secrets: [dbKey]
secrets:
- {name: dbKey, kind: symmetric-key}
`
}

func (r *replicas) register(c *core.CAS, text string, link policy.Link) (*wire.Registration, error) {
	r.t.Helper()
	s := &policy.Signed{Policy: text, Link: link}
	if err := policy.Sign(s, r.owner); err != nil {
		r.t.Fatal(err)
	}
	return c.Register(s)
}

// Two replicas take two different version 2s of one policy: exactly one
// is stored, the other is refused with the conflict named, and both
// replicas then hold the same, verifying history. The second replica
// decides on a state it has not taken in yet (it does not watch): it must
// not write its version over the first's.
func TestReplicasRegisterOneVersionOnce(t *testing.T) {
	r := newReplicas(t)
	var aBefore, aAfter, bBefore, bAfter func()
	a, b := r.start(&aBefore, &aAfter), r.start(&bBefore, &bAfter)
	v1, err := r.register(a, r.text("2h"), policy.Link{Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := policy.Link{Version: 2, Predecessor: v1.Digest}
	for _, concurrent := range []bool{false, true} {
		t.Run(map[bool]string{false: "stale replica", true: "at the same time"}[concurrent], func(t *testing.T) {
			if concurrent {
				cur, err := a.Policy("shop")
				if err != nil {
					t.Fatal(err)
				}
				next = policy.Link{Version: cur.Version + 1, Predecessor: cur.Digest}
				// Both decide on the same state; a commits first, then b,
				// which takes a's commit in only as its own transaction
				// starts.
				aArrived, bArrived, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
				aBefore = func() { close(aArrived); <-bArrived }
				aAfter = func() { close(aDone) }
				bBefore = func() { close(bArrived); <-aArrived; <-aDone }
			}
			texts := []string{r.text("3h"), r.text("4h")}
			if concurrent {
				texts = []string{r.text("5h"), r.text("6h")}
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, c := range []*core.CAS{a, b} {
				run := func() { _, errs[i] = r.register(c, texts[i], next) }
				if concurrent {
					wg.Go(run)
				} else {
					run()
				}
			}
			wg.Wait()
			won := 0
			for i, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, core.ErrConflict) || !strings.Contains(err.Error(), "another document"):
					t.Errorf("replica %d: %v", i, err)
				}
			}
			if won != 1 {
				t.Fatalf("%d registrations won: %v", won, errs)
			}
			var histories [][]wire.Record
			for _, c := range []*core.CAS{a, b} {
				h, err := c.History("shop")
				if err != nil {
					t.Fatal(err)
				}
				key, _ := c.HistoryKey()
				if err := wire.VerifyHistory(h, key); err != nil {
					t.Errorf("history: %v", err)
				}
				histories = append(histories, h)
			}
			if len(histories[0]) != next.Version || len(histories[1]) != next.Version || histories[0][next.Version-1].Digest != histories[1][next.Version-1].Digest {
				t.Errorf("the replicas' histories differ: %d and %d versions", len(histories[0]), len(histories[1]))
			}
		})
	}
}

// A state object put back as it was before an update is refused when a
// replica unlocks: it stays in recovery, naming the digest.
func TestOlderStateObjectRefusedAtUnlock(t *testing.T) {
	r := newReplicas(t)
	var none func()
	a := r.start(&none, &none)
	v1, err := r.register(a, r.text("2h"), policy.Link{Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := (&Store{name: "cas"}).recordName("policies", "shop")
	old := &servicesv1beta1.CASStateRecord{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, old); err != nil {
		t.Fatal(err)
	}
	if _, err := r.register(a, r.text("3h"), policy.Link{Version: 2, Predecessor: v1.Digest}); err != nil {
		t.Fatal(err)
	}
	// One more transaction, so the head's journal no longer holds shop.
	other := strings.NewReplacer("name: shop", "name: other", "api.shop.svc", "api.other.svc").Replace(r.text("2h"))
	if _, err := r.register(a, other, policy.Link{Version: 1}); err != nil {
		t.Fatal(err)
	}
	cur := &servicesv1beta1.CASStateRecord{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, cur); err != nil {
		t.Fatal(err)
	}
	// Generation included: the object looks as it did.
	cur.Spec = old.Spec
	if err := r.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	c, err := core.Open(core.Config{Store: open(t, r.c, r.ns), Sealer: r.sealer, InitToken: core.FixedToken(token)})
	if err != nil {
		t.Fatal(err)
	}
	if st, why := c.Status(); st != wire.RecoveryMode || !strings.Contains(why, "does not match its digest") {
		t.Errorf("a replica on an older state object: %s %q", st, why)
	}
}

// Two replicas initialised at once: one inits CAS, the other is told CAS
// is initialised (and then waits for its seed), even when the other's init
// lands while its own is being written: taking that in must not wait for
// the init in progress.
func TestConcurrentInitsOneWins(t *testing.T) {
	r := newReplicas(t)
	var aBefore, aAfter, bBefore, bAfter func()
	openOne := func(before, after *func()) *core.CAS {
		c, err := core.Open(core.Config{Store: gated{open(t, r.c, r.ns), before, after}, Sealer: seal.NoSealer{}, InitToken: core.FixedToken(token)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := openOne(&aBefore, &aAfter), openOne(&bBefore, &bAfter)
	owners := []*ecdsa.PublicKey{&r.owner.PublicKey}
	bBefore = func() {
		if _, err := a.Init(owners, 1, token); err != nil {
			t.Errorf("a's init: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Init(owners, 1, token)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, core.ErrInitialized) {
			t.Errorf("b's init after a's: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b's init never returned: taking in a's init waited for b's own")
	}
	if st, why := b.Status(); st != wire.RecoveryMode || !strings.Contains(why, "another replica initialised CAS") {
		t.Errorf("b after a's init: %s %q", st, why)
	}
	if st, _ := a.Status(); st != wire.Ready {
		t.Errorf("a after its init: %s", st)
	}
}

// nodeKey is a test's per-node sealing key.
func nodeKey(node string) func() ([]byte, error) {
	return func() ([]byte, error) {
		k := sha256.Sum256([]byte("test sealing key of " + node))
		return k[:], nil
	}
}

// The seed sealed in the state, per node: with every replica gone, one
// started again on a node whose slot holds the seed serves with the same
// CAs; one on a node without a slot waits for the owners (or a peer),
// saying so, and seals the seed into its own slot once recovered.
func TestRootSeedSealedPerNodeInTheState(t *testing.T) {
	r := newReplicas(t)
	var none func()
	on := func(node string) *core.CAS {
		c, err := core.Open(core.Config{Store: gated{open(t, r.c, r.ns), &none, &none}, InitToken: core.FixedToken(token),
			Sealer: seal.SlotSealer{Node: node, Key: nodeKey(node), What: "test key", Simulated: true}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := on("node-a")
	shares, err := first.Init([]*ecdsa.PublicKey{&r.owner.PublicKey}, 1, token)
	if err != nil {
		t.Fatal(err)
	}
	cas, _ := first.CAs()
	again := on("node-a")
	if st, why := again.Status(); st != wire.Ready {
		t.Fatalf("a replica started again on node-a: %s %q", st, why)
	}
	if got, _ := again.CAs(); got.RootCA != cas.RootCA {
		t.Error("the root CA changed across the restart")
	}
	other := on("node-b")
	if st, why := other.Status(); st != wire.RecoveryMode || !strings.Contains(why, "no sealed seed for node node-b") {
		t.Fatalf("a replica on node-b: %s %q", st, why)
	}
	sh, err := seed.OpenShare(shares.Shares[0].Sealed, r.owner)
	if err != nil {
		t.Fatal(err)
	}
	if need, err := other.Recover(sh, nil); need != 0 || err != nil {
		t.Fatalf("recover: %d %v", need, err)
	}
	if st, why := on("node-b").Status(); st != wire.Ready {
		t.Errorf("node-b after its replica was recovered once: %s %q", st, why)
	}
	// A slot sealed under another key (another chip) does not open.
	wrong, err := core.Open(core.Config{Store: open(t, r.c, r.ns), InitToken: core.FixedToken(token),
		Sealer: seal.SlotSealer{Node: "node-a", Key: nodeKey("elsewhere"), What: "test key"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, why := wrong.Status(); st != wire.RecoveryMode || !strings.Contains(why, "does not open with this VM's test key") {
		t.Errorf("node-a's slot under another key: %s %q", st, why)
	}
}
