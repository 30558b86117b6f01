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
	run := func(cfg Config, within time.Duration) error {
		cfg.CAS = addr
		cfg.Out = filepath.Join(t.TempDir(), "tls-config")
		cfg.MinRetry, cfg.MaxRetry = 50*time.Millisecond, 100*time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		err := Run(ctx, cfg, slog.New(slog.DiscardHandler))
		if _, statErr := os.Stat(cfg.Out); err != nil && !errors.Is(statErr, os.ErrNotExist) {
			t.Errorf("a refused pod keeps what CAS gave it: %v", statErr)
		}
		return err
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
	if err := run(cfg, time.Minute); err != nil {
		t.Fatalf("a pod of a CAS that only grew: %v", err)
	}
	// A witness that never cosigned.
	_, vkey, _ := witness.Key(t.TempDir(), "witness.example")
	withWitness := cfg
	withWitness.LogMemory, withWitness.WitnessPolicy = "", fmt.Sprintf("witness w %s http://127.0.0.1:1\nquorum w\n", vkey)
	if err := run(withWitness, 2*time.Second); err == nil || !strings.Contains(err.Error(), "lacks the cosignatures") {
		t.Errorf("a pod requiring a witness none of whose cosignatures CAS has: %v", err)
	}

	// The older copy put back, CAS restarted.
	stop()
	copyState(t, backup, state)
	_, addr, _ = start()
	err := run(cfg, 2*time.Second)
	if !errors.Is(err, tlog.ErrInconsistent) || !strings.Contains(err.Error(), "size 2") || !strings.Contains(err.Error(), "size 3") {
		t.Errorf("a pod of the rolled-back CAS: %v", err)
	}
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
