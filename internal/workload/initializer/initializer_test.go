package initializer

import (
	"context"
	"crypto/ecdsa"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/las"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

const manifest = `version: cloister.dev/policy/v1
name: shop
owners: {keys: []}
allowSimulation: true
services:
- name: shop-deployment-web
  attestation: {identities: []}
  certificate: {sans: [web.shop.svc]}
  files: {/workload-secret: "{{ .Secrets.ws.Hex }}"}
  secrets: [ws]
secrets:
- {name: ws, kind: symmetric-key}
`

// Against a real CAS and a real LAS (both simulated, on loopback): the
// initializer waits, saying why, while CAS has no manifest for it, and
// writes the pod's certificate, CAs and secret once one is set.
func TestInitializerWaitsForTheManifest(t *testing.T) {
	dir := t.TempDir()
	admin, cfg := onLoopback(t, dir)
	out := filepath.Join(dir, "cloister", "tls-config")
	cfg.Out, cfg.MinRetry, cfg.MaxRetry = out, 50*time.Millisecond, 200*time.Millisecond
	logs := &testenv.Buffer{}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()

	// No manifest yet: it waits and says so once.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "not attested yet") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // several retries
	if n := strings.Count(logs.String(), "not attested yet"); n != 1 || !strings.Contains(logs.String(), "shop") {
		t.Fatalf("%d wait messages:\n%s", n, logs)
	}
	select {
	case err := <-done:
		t.Fatalf("finished without a manifest: %v", err)
	default:
	}

	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(t, manifest)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	// Readable by the pod's group (every container's), by no one else.
	for _, f := range []string{"certChain.pem", "key.pem", "mesh-ca.pem", "root-ca.pem", "files/workload-secret"} {
		if info, err := os.Stat(filepath.Join(out, f)); err != nil || info.Size() == 0 || info.Mode().Perm() != 0o640 {
			t.Errorf("%s: %v %v", f, info.Mode(), err)
		}
	}
	for _, d := range []string{".", "files"} {
		if info, err := os.Stat(filepath.Join(out, d)); err != nil || info.Mode().Perm() != 0o750 {
			t.Errorf("folder %s: %v %v", d, info.Mode(), err)
		}
	}
	if !strings.Contains(logs.String(), "simulated evidence: insecure") {
		t.Errorf("trusting a simulated CAS without saying so:\n%s", logs)
	}
}

// A CAS that does not meet the expectation is never sent the pod's
// request, and the reason is logged.
func TestInitializerRefusesAnotherCAS(t *testing.T) {
	dir := t.TempDir()
	url, _, _ := castest.Start(t, filepath.Join(dir, "state"), "none")
	logs := &testenv.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := Run(ctx, Config{CAS: strings.TrimPrefix(url, "https://"), Expect: `{"identities": [{"type": "sgx", "mrenclave": "` + strings.Repeat("ab", 32) + `"}]}`, Policy: "shop", Service: "web", PolicyOwners: initenv.NoOwners, LAS: "http://127.0.0.1:1", Out: dir,
		MinRetry: 50 * time.Millisecond}, slog.New(slog.NewTextHandler(logs, nil)))
	if err == nil || !strings.Contains(err.Error(), "is not the CAS this pod expects") || !strings.Contains(err.Error(), "simulat") {
		t.Errorf("error %v\n%s", err, logs)
	}
	if err := (&Config{CAS: "x"}).Validate(); err == nil || !strings.Contains(err.Error(), "policy service policy owners LAS output folder") {
		t.Errorf("validate: %v", err)
	}
}

// The expected CAS identity is read strictly: a typo is an error, never a
// policy that trusts whichever CAS answers.
func TestExpectIsStrict(t *testing.T) {
	for _, tc := range []struct{ expect, want string }{
		{"", "CLOISTER_CAS_EXPECT is empty"},
		{`{}`, "names no CAS identity, so any CAS would do"},
		{`{"identitys": [{"type": "sgx", "mrenclave": "` + strings.Repeat("ab", 32) + `"}]}`, `unknown field "identitys"`},
		{`{"identities": [{"type": "sgx"}]}`, "an sgx identity pins the enclave"},
		{`{"identities": [{"type": "sgx", "mrenclave": "abcd"}]}`, "mrenclave has 2 bytes"},
		{`{"allowSimulation": true} {}`, "CLOISTER_CAS_EXPECT"},
	} {
		_, err := parseExpect(tc.expect)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.expect, err, tc.want)
		}
	}
	if p, err := parseExpect(`{"allowSimulation":true}`); err != nil || !p.AllowSimulation {
		t.Errorf("what cloister generate writes for sim: %+v %v", p, err)
	}
}

// Pod start to certificate written, in simulation on loopback: CAS
// trusted by its evidence, LAS's evidence, attestation, the files.
func BenchmarkInitializer(b *testing.B) {
	dir := b.TempDir()
	admin, cfg := onLoopback(b, dir)
	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(b, manifest)); err != nil {
		b.Fatal(err)
	}
	cfg.Out = filepath.Join(dir, "out")
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		if err := Run(context.Background(), cfg, log); err != nil {
			b.Fatal(err)
		}
	}
}

// onLoopback starts a simulated CAS (initialised, its board the tests')
// and a simulated LAS on loopback, and returns CAS's client and the
// initializer's configuration for the manifest's web service.
func onLoopback(tb testing.TB, dir string) (*casclient.Client, Config) {
	tb.Helper()
	state := filepath.Join(dir, "state")
	url, ca, _ := castest.Start(tb, state, "none")
	caPEM, _ := os.ReadFile(ca)
	admin, err := casclient.New(url, caPEM, nil)
	if err != nil {
		tb.Fatal(err)
	}
	owner, _ := policy.NewKey()
	if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(tb, state), castest.BoardPEM()); err != nil {
		tb.Fatal(err)
	}
	return admin, Config{CAS: strings.TrimPrefix(url, "https://"), Expect: `{"allowSimulation":true}`, SimKey: casSimKey(tb, state),
		Policy: "shop", Service: "shop-deployment-web", PolicyOwners: initenv.NoOwners, LAS: loopbackLAS(tb, dir)}
}

// loopbackLAS is a simulated LAS on loopback, signing with the tests'
// LAS key, and its URL.
func loopbackLAS(tb testing.TB, dir string) string {
	l := httptest.NewServer((&las.Server{Probe: &las.Probe{DevRoot: dir}, Quoter: &sim.Quoter{Key: castest.LASKey()}}).Handler())
	tb.Cleanup(l.Close)
	return l.URL
}

// boardApproved is the owner-less manifest as version 1, which the
// board of the tests' CASes approves.
func boardApproved(tb testing.TB, text string) wire.PolicyRequest {
	tb.Helper()
	s := &policy.Signed{Policy: text, Link: policy.Link{Version: 1}}
	if err := policy.Sign(s, castest.BoardKey()); err != nil {
		tb.Fatal(err)
	}
	return wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}
}

// casSimKey is the simulation key of the CAS on state folder dir, as
// generate writes it into the initializer's environment.
func casSimKey(tb testing.TB, dir string) string {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, cas.SimulationPubKeyFile))
	if err != nil {
		tb.Fatal(err)
	}
	return string(raw)
}

// What the host puts into the pod's environment never panics the
// initializer, and nothing it accepts trusts any CAS.
func FuzzExpect(f *testing.F) {
	for _, s := range []string{`{"allowSimulation":true}`, `{}`, `{"identities": [{"type": "sgx", "mrenclave": "` + strings.Repeat("ab", 32) + `"}]}`, `{"identities": [{"type": "nitro", "pcrs": {"0": ""}}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseExpect(s)
		if err == nil && len(p.Identities) == 0 && !p.AllowSimulation {
			t.Errorf("%q accepted without an identity", s)
		}
	})
}

// The simulated CAS's key is required exactly when the expectation allows
// simulation, and must be a P-256 public key.
func TestParseSimKey(t *testing.T) {
	pub := string(policy.MarshalPublicKey(&castest.LASKey().PublicKey))
	for _, tt := range []struct {
		name, text string
		simulation bool
		want       string
	}{
		{"simulation with the key", pub, true, ""},
		{"no simulation, no key", "", false, ""},
		{"simulation without a key", "", true, "a simulated CAS is trusted only by the key"},
		{"a key without simulation", pub, false, "does not allow simulation"},
		{"not a key", "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n", true, initenv.EnvCASSimKey},
	} {
		keys, err := parseSimKey(tt.text, tt.simulation)
		if tt.want == "" && (err != nil || (tt.simulation && len(keys) != 1)) {
			t.Errorf("%s: %v, %d keys", tt.name, err, len(keys))
		}
		if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// The pod pins its manifest's owners: against a policy of its name that
// others own (or that has owners when it was made for none) it gets and
// writes nothing, and says why.
func TestPolicyOwnersPinned(t *testing.T) {
	dir := t.TempDir()
	admin, base := onLoopback(t, dir)
	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(t, manifest)); err != nil {
		t.Fatal(err)
	}
	victim, _ := policy.NewKey()
	second, _ := policy.NewKey()
	attacker, _ := policy.NewKey()
	fp := func(k *ecdsa.PrivateKey) string { return policy.Fingerprint(&k.PublicKey) }
	// Policies the board approved under free names: the attacker lists
	// the victim's public key beside its own, threshold 1, and signs it
	// alone; another is the victim's alone, at threshold 1.
	register := func(name string, threshold int, owners []*ecdsa.PrivateKey, signer *ecdsa.PrivateKey) {
		t.Helper()
		text := strings.NewReplacer("\nname: shop\n", "\nname: "+name+"\n", "web.shop.svc", "web."+name+".svc").Replace(manifest)
		keys := "owners:\n  threshold: " + strconv.Itoa(threshold) + "\n  keys:\n"
		for _, o := range owners {
			keys += "  - |\n" + "    " + strings.ReplaceAll(strings.TrimSpace(string(policy.MarshalPublicKey(&o.PublicKey))), "\n", "\n    ") + "\n"
		}
		text = strings.Replace(text, "owners: {keys: []}\n", keys, 1)
		req := boardApproved(t, text)
		s := &policy.Signed{Policy: req.Policy, Link: req.Link, Signatures: req.Signatures}
		if err := policy.Sign(s, signer); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RegisterPolicy(context.Background(), wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	register("squat", 1, []*ecdsa.PrivateKey{victim, attacker}, attacker)
	register("lowered", 1, []*ecdsa.PrivateKey{victim}, victim)
	someone, _ := policy.NewKey()
	for _, tc := range []struct{ policy, owners, threshold, want string }{
		{"shop", fp(someone), "1", "has no owners, but this workload was made for one owned by"},
		{"shop", "sha256:abc", "1", "is not an owner fingerprint"},
		{"shop", "", "", "policy owners"},
		{"shop", fp(victim), "", "how many of the 1 pinned owners sign a change"},
		{"shop", initenv.NoOwners, "1", "is set for an owner-less manifest"},
		{"squat", fp(victim), "1", "is also owned by [" + fp(attacker) + "], which this workload was not made for"},
		{"lowered", fp(victim) + "," + fp(second), "2", "is changed by 1 of its owners' signatures, fewer than the 2 this workload was made for"},
	} {
		out := filepath.Join(dir, "out-"+tc.policy+strings.ReplaceAll(tc.owners, ":", "-"))
		cfg := base
		cfg.Policy, cfg.PolicyOwners, cfg.PolicyOwnerThreshold, cfg.Out, cfg.MinRetry, cfg.MaxRetry = tc.policy, tc.owners, tc.threshold, out, 10*time.Millisecond, 20*time.Millisecond
		logs := &testenv.Buffer{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := Run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)))
		cancel()
		if err == nil || !strings.Contains(err.Error()+logs.String(), tc.want) {
			t.Errorf("%s pinned to %q: %v\n%s, want %q", tc.policy, tc.owners, err, logs, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s pinned to %q: the output folder was written: %v", tc.policy, tc.owners, err)
		}
	}
	// The victim's own policy, pinned as generate pins it, gives the pod
	// what it was made for.
	cfg := base
	cfg.Policy, cfg.PolicyOwners, cfg.PolicyOwnerThreshold, cfg.Out = "lowered", fp(victim), "1", filepath.Join(dir, "out-own")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("the pinned owner's own policy: %v", err)
	}
}
