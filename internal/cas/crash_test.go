package cas_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

const (
	childEnv        = "CLOISTER_CAS_TEST_CHILD_STATE"
	childSimKeysEnv = "CLOISTER_CAS_TEST_CHILD_SIM_KEYS"
)

// TestMain lets the test binary serve as a cloister-cas child process, so
// a test can kill it with SIGKILL.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		cfg := cas.Config{Listen: "127.0.0.1:0", StateDir: dir, Sealer: "file:" + filepath.Join(dir, "seed"), Simulation: true,
			SimKeys: os.Getenv(childSimKeysEnv), Ready: func(a string) { fmt.Println(a) }}
		err := cas.Run(context.Background(), cfg, slog.New(slog.DiscardHandler))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// child starts a CAS process on dir and returns its client.
func child(t testing.TB, dir string) (*exec.Cmd, *casclient.Client) {
	t.Helper()
	return childWith(t, dir, "")
}

// childWith is child taking simulated evidence signed by the keys in the
// file simKeys.
func childWith(t testing.TB, dir, simKeys string) (*exec.Cmd, *casclient.Client) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // re-runs this test binary as the CAS process
	cmd.Env = append(os.Environ(), childEnv+"="+dir, childSimKeysEnv+"="+simKeys)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the test may have killed it already
		_ = cmd.Wait()         // killed: its status is the kill's
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child CAS did not start: %v", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, cas.TLSCertFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := casclient.New("https://"+strings.TrimSpace(line), ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, c
}

func signedPolicy(t testing.TB, name string, owner *ecdsa.PrivateKey) wire.PolicyRequest {
	doc := `version: cloister.dev/policy/v1
name: ` + name + `
owners: {keys: ["` + strings.ReplaceAll(string(policy.MarshalPublicKey(&owner.PublicKey)), "\n", `\n`) + `"]}
allowSimulation: true
services: [{name: web, attestation: {identities: []}, certificate: {sans: [` + name + `]}, secrets: [k]}]
secrets: [{name: k, kind: symmetric-key}]
`
	s := &policy.Signed{Policy: doc, Link: policy.Link{Version: 1}}
	// A new name: the board approves it besides its owner.
	for _, k := range []*ecdsa.PrivateKey{owner, castest.BoardKey()} {
		if err := policy.Sign(s, k); err != nil {
			t.Fatal(err)
		}
	}
	return wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}
}

// kill -9 during a burst of concurrent policy writes: after a restart
// every acknowledged write is there and the state opens cleanly.
func TestKillDuringWrites(t *testing.T) {
	dir := t.TempDir()
	cmd, c := child(t, dir)
	owner, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(t, dir), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 8, 400
	reqs := make([][]wire.PolicyRequest, writers)
	for w := range writers {
		for i := range perWriter {
			reqs[w] = append(reqs[w], signedPolicy(t, fmt.Sprintf("p-%d-%d", w, i), owner))
		}
	}
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, req := range reqs[w] {
				if _, err := c.RegisterPolicy(context.Background(), req); err != nil {
					return // the process is gone
				}
				mu.Lock()
				acked = append(acked, fmt.Sprintf("p-%d-%d", w, i))
				mu.Unlock()
			}
		}()
	}
	// Kill once writes are flowing.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 50 || time.Now().After(deadline) {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_ = cmd.Wait() // killed above: its status is the kill's
	if len(acked) == 0 || len(acked) == writers*perWriter {
		t.Fatalf("%d of %d writes acknowledged before the kill: nothing was tested", len(acked), writers*perWriter)
	}
	t.Logf("%d writes acknowledged before SIGKILL", len(acked))

	_, c = child(t, dir)
	for _, name := range acked {
		h, err := c.History(context.Background(), name)
		if err != nil || len(h.Records) != 1 {
			var apiErr *casclient.APIError
			if errors.As(err, &apiErr) && apiErr.Status == 503 {
				t.Fatalf("after restart: %v", err)
			}
			t.Errorf("acknowledged policy %s: %v", name, err)
		}
	}
}
