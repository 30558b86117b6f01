package kubestore

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/store/backup"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// waitProblem waits until c reports problem, and returns its reason.
func waitProblem(t *testing.T, c *core.CAS, problem string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, why := c.Status()
		if _, p := c.StateMark(); p == problem && st == wire.RecoveryMode {
			return why
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never reported %q: %s %q", problem, st, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CAS's state objects deleted under a running replica, as CAS's service
// account can: the replica leaves Ready and says why, instead of serving
// an empty state with no board, on which names would be first come; a
// stranger's policy of a held name is refused. A backup restored into the
// emptied state (older than what the replica served) is refused too, until
// the recovery owner accepts its generation with a share; the other
// replica then takes the state in from the new epoch.
func TestStateDeletedUnderARunningReplica(t *testing.T) {
	ctx := context.Background()
	r := newReplicas(t)
	s := open(t, r.c, r.ns)
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go s.Watch(wctx, time.Hour)
	a, err := core.Open(core.Config{Store: s, Sealer: r.sealer, InitToken: core.FixedToken(token), AllowSimulation: true})
	if err != nil {
		t.Fatal(err)
	}
	shares, err := a.Init([]*ecdsa.PublicKey{&r.owner.PublicKey}, 1, token)
	if err != nil {
		t.Fatal(err)
	}
	b := r.start(new(func()), new(func()))
	if _, err := r.register(a, r.text("2h"), policy.Link{Version: 1}); err != nil {
		t.Fatal(err)
	}
	old, err := backup.Export(open(t, r.c, r.ns), r.ns+"/cas", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := a.Policy("shop")
	if _, err := r.register(a, r.text("3h"), policy.Link{Version: 2, Predecessor: v1.Digest}); err != nil {
		t.Fatal(err)
	}

	if err := r.c.DeleteAllOf(ctx, &servicesv1beta1.CASStateRecord{}, client.InNamespace(r.ns), client.MatchingLabels{LabelCAS: "cas"}); err != nil {
		t.Fatal(err)
	}
	for _, replica := range []*core.CAS{a, b} {
		if why := waitProblem(t, replica, wire.ProblemLost); !strings.Contains(why, "the state was removed") {
			t.Errorf("the reason: %q", why)
		}
	}
	squatter, _ := policy.NewKey()
	squat := strings.ReplaceAll(r.text("2h"), strings.TrimSpace(string(policy.MarshalPublicKey(&r.owner.PublicKey))), strings.TrimSpace(string(policy.MarshalPublicKey(&squatter.PublicKey))))
	sq := &policy.Signed{Policy: squat, Link: policy.Link{Version: 1}}
	if err := policy.Sign(sq, squatter); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(sq); !errors.Is(err, core.ErrRecovery) {
		t.Errorf("a squat on the emptied state: %v", err)
	}
	if _, err := a.Attest(&wire.AttestRequest{Policy: "shop", Service: "api"}); !errors.Is(err, core.ErrRecovery) {
		t.Errorf("an attestation on the emptied state: %v", err)
	}

	// The older backup restored where nothing is now: still refused.
	if err := Restore(ctx, r.c, Options{Namespace: r.ns, CAS: "cas"}, old); err != nil {
		t.Fatal(err)
	}
	why := waitProblem(t, a, wire.ProblemRolledBack)
	if !strings.Contains(why, "older than generation") {
		t.Errorf("the reason after the restore: %q", why)
	}
	sh, err := seed.OpenShare(shares.Shares[0].Sealed, r.owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recover(sh, nil); !errors.Is(err, core.ErrRolledBack) {
		t.Fatalf("the owner's share alone: %v", err)
	}
	mark, _ := a.StateMark()
	m := regexp.MustCompile(`the state is at generation (\d+),`).FindStringSubmatch(why)
	if m == nil {
		t.Fatalf("the reason names no generation: %q", why)
	}
	g, _ := strconv.ParseUint(m[1], 10, 64)
	sig, err := casclient.OwnerSignature(r.owner, wire.AcceptDigest(mark.Check, g))
	if err != nil {
		t.Fatal(err)
	}
	if need, err := a.Recover(sh, &wire.Acceptance{Generation: g, OwnerSignature: sig}); err != nil || need != 0 {
		t.Fatalf("the owner's acceptance of generation %d: %d %v", g, need, err)
	}
	if p, err := a.Policy("shop"); err != nil || p.Version != 1 {
		t.Errorf("the accepted state: %+v %v", p, err)
	}
	// The other replica takes the seed again (here the file sealer, as a
	// peer would hand it) and the state, now past its mark.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := b.Adopt(mustSeed(t, a)); err == nil {
			if st, _ := b.Status(); st == wire.Ready {
				break
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("the other replica after the acceptance: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mustSeed(t *testing.T, c *core.CAS) []byte {
	t.Helper()
	s, err := c.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
