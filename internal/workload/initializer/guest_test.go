package initializer

import (
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// A pod in a (fake) SEV-SNP VM attests with its VM's own evidence, to a CAS
// in a (fake) VM of its own that it trusts by that CAS's evidence: no LAS,
// no simulation anywhere, only the fakes' test roots trusted by name. A
// tampered report, or a VM launched with another pod policy (host data),
// gets nothing, for the reason named.
func TestGuestEvidence(t *testing.T) {
	dir := t.TempDir()
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Measurement[0] = 0x11
	roots := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(roots, s.RootsPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	vm := func(name string, hostData byte, tamper func([]byte)) string {
		return s.ServeVM(t, filepath.Join(dir, name), []byte{hostData}, tamper)
	}

	state := filepath.Join(dir, "state")
	url, admin := initializedCAS(t, cas.Config{StateDir: state, Sealer: "none", TEE: true, Guest: producetest.GuestPaths(vm("cas-vm", 0xCA, nil)), TestRoots: roots})
	measurement := hex.EncodeToString(s.Measurement[:])
	hostData := "aa" + strings.Repeat("00", 31)
	snpManifest := strings.Replace(strings.Replace(manifest, "allowSimulation: true\n", "", 1),
		"attestation: {identities: []}", "attestation: {identities: [{type: snp, measurement: '"+measurement+"', hostData: '"+hostData+"'}]}", 1)
	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(t, snpManifest)); err != nil {
		t.Fatal(err)
	}
	base := Config{CAS: strings.TrimPrefix(url, "https://"), Expect: `{"identities": [{"type": "snp", "measurement": "` + measurement + `", "hostData": "ca` + strings.Repeat("00", 31) + `"}]}`,
		Policy: "shop", Service: "shop-deployment-web", PolicyOwners: initenv.NoOwners, Evidence: initenv.EvidenceGuest,
		TestRoots: string(s.RootsPEM()), MinRetry: 20 * time.Millisecond, MaxRetry: 50 * time.Millisecond}
	// run runs the initializer against the VM at tsm until it finishes, or
	// (refused) until its log names the reason, want.
	run := func(tsm, want string) (string, *testenv.Buffer, error) {
		cfg := base
		cfg.Guest, cfg.Out = producetest.GuestPaths(tsm), filepath.Join(dir, "out-"+filepath.Base(tsm))
		logs, err := runUntil(cfg, want)
		return cfg.Out, logs, err
	}

	out, logs, err := run(vm("pod-vm", 0xAA, nil), "")
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	for _, f := range []string{"certChain.pem", "key.pem", "files/workload-secret"} {
		if info, err := os.Stat(filepath.Join(out, f)); err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(logs.String(), "own evidence") || !strings.Contains(logs.String(), "INSECURE") || strings.Contains(logs.String(), "simulated") {
		t.Errorf("logs:\n%s", logs)
	}
	for _, tc := range []struct {
		name     string
		hostData byte
		tamper   func([]byte)
		want     string
	}{
		{"tampered", 0xAA, func(r []byte) { r[0xC0] ^= 0xFF }, "signature"},
		{"other-policy", 0xBB, nil, "host data"},
	} {
		out, logs, err := run(vm(tc.name, tc.hostData, tc.tamper), tc.want)
		if err == nil || !strings.Contains(err.Error()+logs.String(), tc.want) {
			t.Errorf("%s: %v\n%s, want %q", tc.name, err, logs, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: the output folder was written: %v", tc.name, err)
		}
	}
	// Guest evidence needs no LAS; a VM without a producer is named.
	if err := (&Config{CAS: "x", Policy: "p", Service: "s", PolicyOwners: initenv.NoOwners, Out: "o", Evidence: initenv.EvidenceGuest}).Validate(); err != nil {
		t.Errorf("guest evidence without LAS: %v", err)
	}
	if err := (&Config{CAS: "x", Policy: "p", Service: "s", PolicyOwners: initenv.NoOwners, Out: "o", LAS: "l", Evidence: "tpm"}).Validate(); err == nil {
		t.Error("evidence tpm accepted")
	}
	_, logs, err = run(filepath.Join(dir, "no-vm"), "offers no evidence")
	if err == nil || !strings.Contains(err.Error()+logs.String(), "offers no evidence") {
		t.Errorf("no VM: %v\n%s", err, logs)
	}
}

// initializedCAS starts a CAS of cfg and initialises it (an owner, the
// tests' board): its URL and an admin client.
func initializedCAS(t *testing.T, cfg cas.Config) (string, *casclient.Client) {
	t.Helper()
	url, ca, _ := castest.StartConfig(t, cfg)
	caPEM, _ := os.ReadFile(ca)
	admin, err := casclient.New(url, caPEM, nil)
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := policy.NewKey()
	if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(t, cfg.StateDir), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	return url, admin
}

// runUntil runs the initializer until it finishes or, when want is set,
// until its log says want (a refusal it retries), and returns its log.
func runUntil(cfg Config, want string) (*testenv.Buffer, error) {
	logs := &testenv.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
	for {
		select {
		case err := <-done:
			return logs, err
		case <-time.After(20 * time.Millisecond):
			if want != "" && strings.Contains(logs.String(), want) {
				cancel()
				return logs, <-done
			}
		}
	}
}
