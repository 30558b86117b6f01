package initializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// A pod whose policy says where it remembers CAS's log starts while CAS
// only grows; once CAS's whole state is replaced by an older copy, a new
// pod is refused, the two checkpoints named, and what the rolled-back
// CAS gave it is removed. A pod that requires a witness's cosignatures
// is refused while none cosigned.
func TestInitializerRefusesARolledBackCAS(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	start := func() (*casclient.Client, string, func()) {
		url, caFile, stop := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "file:" + filepath.Join(dir, "seed.sealed"),
			Simulation: true, SimKeys: castest.LASPubFile(t)})
		ca, _ := os.ReadFile(caFile)
		c, err := casclient.New(url, ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, strings.TrimPrefix(url, "https://"), stop
	}
	admin, addr, stop := start()
	owner, _ := policy.NewKey()
	if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(t, state), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(t, manifest)); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Expect: `{"allowSimulation":true}`, SimKey: casSimKey(t, state),
		Policy: "shop", Service: "shop-deployment-web", PolicyOwners: initenv.NoOwners, LAS: loopbackLAS(t, dir)}
	outOf := func(cfg Config) Config {
		cfg.CAS = addr
		cfg.Out = filepath.Join(t.TempDir(), "tls-config")
		cfg.MinRetry, cfg.MaxRetry = 50*time.Millisecond, 100*time.Millisecond
		return cfg
	}
	run := func(cfg Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return Run(ctx, outOf(cfg), slog.New(slog.DiscardHandler))
	}
	// refused runs the initializer until it says why it waits (says[0],
	// within a minute), which must say says, and checks that it kept
	// nothing CAS gave it.
	refused := func(cfg Config, says ...string) {
		t.Helper()
		cfg = outOf(cfg)
		logs := &testenv.Buffer{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(logs.String(), says[0]) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err == nil {
			t.Error("the initializer succeeded against a CAS it should refuse")
		}
		for _, s := range says {
			if !strings.Contains(logs.String(), s) {
				t.Errorf("the initializer's reason does not say %q:\n%s", s, logs)
			}
		}
		if _, err := os.Stat(cfg.Out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused pod keeps what CAS gave it: %v", err)
		}
	}
	// The backup; then the log grows (another policy).
	stop()
	backup := t.TempDir()
	copyState(t, state, backup)
	admin, addr, stop = start()
	other := strings.NewReplacer("name: shop", "name: bank", "web.shop.svc", "web.bank.svc").Replace(manifest)
	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(t, other)); err != nil {
		t.Fatal(err)
	}
	cfg.LogMemory = filepath.Join(t.TempDir(), "log-checkpoint")
	if err := run(cfg); err != nil {
		t.Fatalf("a pod of a CAS that only grew: %v", err)
	}
	// A witness that never cosigned.
	_, vkey, _ := witness.Key(t.TempDir(), "witness.example")
	withWitness := cfg
	withWitness.LogMemory, withWitness.WitnessPolicy = "", fmt.Sprintf("witness w %s http://127.0.0.1:1\nquorum w\n", vkey)
	refused(withWitness, "lacks the cosignatures")

	// The older copy put back, CAS restarted.
	stop()
	copyState(t, backup, state)
	_, addr, _ = start()
	refused(cfg, tlog.ErrInconsistent.Error(), "size 2", "size 3")
}

// copyState replaces folder to by a copy of from.
func copyState(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}
