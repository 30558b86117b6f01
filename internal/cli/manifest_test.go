package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/workload/generate"
)

// The data owner's journey against a real CAS on loopback (simulated):
// generate, set (which initialises CAS), a workload attests with its
// policy digest and gets a certificate of the mesh CA, verify writes the
// history, an owner's update is accepted and another key's refused, and
// after a restart recover unseals CAS with the same history.
func TestSetVerifyRecover(t *testing.T) {
	host := registryWith(t, "web", "web2", "initializer")
	work, resources := t.TempDir(), t.TempDir()
	yamlFile := filepath.Join(resources, "shop.yaml")
	if err := os.WriteFile(yamlFile, []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	generateArgs := []string{"generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--policy", "shop",
		"--initializer-image", host + "/initializer:v1", resources}
	mustRun(t, generateArgs...)

	state := filepath.Join(t.TempDir(), "state")
	url, _, stop := castest.Start(t, state, "none")
	casArgs := []string{"-c", url, "--insecure-simulated-cas", "--cas-sim-key", filepath.Join(state, cas.SimulationPubKeyFile), "--workspace", work}
	out, stderr, err := run(t, append(append([]string{"set", "--init-token-file", filepath.Join(state, cas.InitTokenFile)}, casArgs...), resources)...)
	if err != nil || !strings.Contains(out, "manifest shop set: version 1") || !strings.Contains(stderr, "CAS initialised") {
		t.Fatalf("set: %v\n%s\n%s", err, out, stderr)
	}
	for _, f := range []string{"seedshares.json", "root-ca.pem", "mesh-ca.pem"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Error(err)
		}
	}

	// A workload whose evidence names its policy digest gets a mesh
	// certificate; one naming another policy does not.
	web := func() generate.Workload {
		data, _ := os.ReadFile(yamlFile)
		res, err := generate.Inspect(data)
		if err != nil {
			t.Fatal(err)
		}
		return res.Workloads[0]
	}
	attestAs := func(digest string) error {
		expect := casclient.Expect{Policy: simulationOK()}
		expect.Verify.SimKeys = []*ecdsa.PublicKey{castest.SimKey(t, state)}
		c, _, err := casclient.NewAttested(t.Context(), url, expect, nil)
		if err != nil {
			t.Fatal(err)
		}
		hostData, _ := hex.DecodeString(digest)
		_, err = c.Attest(context.Background(), "shop", web().Service, hostDataQuoter{&sim.Quoter{Key: castest.LASKey()}, hostData}, filepath.Join(t.TempDir(), "out"))
		return err
	}
	if err := attestAs(web().Digest); err != nil {
		t.Fatalf("the workload: %v", err)
	}
	if err := attestAs(strings.Repeat("ab", 32)); err == nil || !strings.Contains(err.Error(), "host data is abab") {
		t.Errorf("another policy: %v", err)
	}

	verify := func() string {
		out, _, err := run(t, append([]string{"verify"}, append(casArgs, resources)...)...)
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		return out
	}
	if out := verify(); !strings.Contains(out, "manifest shop version 1") || !strings.Contains(out, "1 versions, each in CAS's transparency log") || !strings.Contains(out, "1 pod policies") {
		t.Errorf("verify: %s", out)
	}
	manifest, _ := os.ReadFile(filepath.Join(work, "manifest.yaml"))
	if got, _ := os.ReadFile(filepath.Join(work, "verify", "manifest.0.yaml")); string(got) != string(manifest) {
		t.Error("verify/manifest.0.yaml is not the manifest set")
	}
	if p, _ := os.ReadFile(filepath.Join(work, "verify", "policy.shop-deployment-web.json")); !strings.Contains(string(p), host+"/web@sha256:") {
		t.Errorf("the pod policy: %s", p)
	}
	if rootCA, _ := os.ReadFile(filepath.Join(work, "verify", "root-ca.pem")); !certIn(t, rootCA) {
		t.Error("verify/root-ca.pem")
	}
	// The workspace remembers the largest checkpoint of CAS's log it saw.
	if cp, _ := os.ReadFile(filepath.Join(work, "log-checkpoint")); !strings.Contains(string(cp), ".cloister/log\n2\n") { // the init, the manifest
		t.Errorf("the checkpoint remembered: %q", cp)
	}

	// Another key than the workload owner's cannot change the manifest.
	if err := os.WriteFile(yamlFile, []byte(strings.ReplaceAll(strings.ReplaceAll(shopYAML, "REGISTRY", host), "/web:v1", "/web2:v1")), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, generateArgs...)
	other, _ := keygen(t, t.TempDir(), "other.pem")
	if _, _, err := run(t, append(append([]string{"set"}, casArgs...), "--workload-owner-key", other, resources)...); err == nil || !strings.Contains(err.Error(), "is not among the keys that may approve version 2") {
		t.Errorf("an update by another key: %v", err)
	}
	if _, _, err := run(t, append([]string{"verify"}, casArgs...)...); err == nil || !strings.Contains(err.Error(), "CAS runs another manifest shop (version 1") {
		t.Errorf("verify while CAS runs the old manifest: %v", err)
	}
	if out := mustRun(t, append(append([]string{"set"}, casArgs...), resources)...); !strings.Contains(out, "version 2") {
		t.Errorf("the owner's update: %s", out)
	}
	if err := attestAs(web().Digest); err != nil {
		t.Errorf("the updated workload: %v", err)
	}
	if out := verify(); !strings.Contains(out, "2 versions") {
		t.Errorf("verify after the update: %s", out)
	}
	// An auditor bundle, re-checked with no connection and no workspace;
	// a byte changed in it fails the claim it touches.
	bundle := filepath.Join(t.TempDir(), "bundle.json")
	if out := mustRun(t, append(append([]string{"verify", "--bundle", bundle}, casArgs...), resources)...); !strings.Contains(out, "auditor bundle written to "+bundle) {
		t.Errorf("verify --bundle: %s", out)
	}
	offline := []string{"verify", "--offline", bundle, "--insecure-simulated-cas", "--cas-sim-key", filepath.Join(state, cas.SimulationPubKeyFile)}
	if out := mustRun(t, offline...); !strings.Contains(out, "PASS log-inclusion v2") || !strings.Contains(out, "PASS consistency") || !strings.Contains(out, "verdict: ") {
		t.Errorf("verify --offline: %s", out)
	}
	raw, _ := os.ReadFile(bundle)
	i := bytes.Index(raw, []byte(`"digest":"`)) + len(`"digest":"`)
	raw[i] ^= 1
	if err := os.WriteFile(bundle, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, offline...); err == nil || !strings.Contains(out, "FAIL manifest-history") || !strings.Contains(err.Error(), "does not verify: manifest-history") {
		t.Errorf("a byte changed in a version's digest: %v\n%s", err, out)
	}

	// Restart: recovery mode until the seed share owner recovers it.
	stop()
	url, _, _ = castest.Start(t, state, "none")
	casArgs[1] = url
	if err := attestAs(web().Digest); err == nil || !strings.Contains(err.Error(), "recovery") {
		t.Errorf("attesting in recovery mode: %v", err)
	}
	if out := mustRun(t, append([]string{"recover"}, casArgs...)...); !strings.Contains(out, "CAS is ready") {
		t.Errorf("recover: %s", out)
	}
	if out := verify(); !strings.Contains(out, "manifest shop version 2") || !strings.Contains(out, "2 versions") {
		t.Errorf("verify after recovery: %s", out)
	}
	if err := attestAs(web().Digest); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}

// hostDataQuoter is LAS's simulated quoter for a pod with the given
// policy digest (LAS finds it from the pod; here the test names it).
type hostDataQuoter struct {
	q        *sim.Quoter
	hostData []byte
}

func (h hostDataQuoter) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	return h.q.QuoteFor(reportData, h.hostData)
}

func simulationOK() attest.Policy { return attest.Policy{AllowSimulation: true} }

func certIn(t *testing.T, data []byte) bool {
	block, _ := pem.Decode(data)
	if block == nil {
		return false
	}
	_, err := x509.ParseCertificate(block.Bytes)
	return err == nil
}

// With no workload owners the manifest is set unsigned once and can
// never be changed.
func TestImmutableManifest(t *testing.T) {
	host := registryWith(t, "web", "web2", "initializer")
	work, resources := t.TempDir(), t.TempDir()
	yamlFile := filepath.Join(resources, "shop.yaml")
	if err := os.WriteFile(yamlFile, []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	generateArgs := []string{"generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--disable-updates",
		"--initializer-image", host + "/initializer:v1", resources}
	mustRun(t, generateArgs...)
	state := filepath.Join(t.TempDir(), "state")
	url, _, _ := castest.Start(t, state, "none")
	set := []string{"set", "-c", url, "--insecure-simulated-cas", "--cas-sim-key", filepath.Join(state, cas.SimulationPubKeyFile), "--workspace", work, "--init-token-file", filepath.Join(state, cas.InitTokenFile), resources}
	if out := mustRun(t, set...); !strings.Contains(out, "version 1") {
		t.Fatalf("set: %s", out)
	}
	if err := os.WriteFile(yamlFile, []byte(strings.ReplaceAll(strings.ReplaceAll(shopYAML, "REGISTRY", host), "/web:v1", "/web2:v1")), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, generateArgs...)
	if _, _, err := run(t, set...); err == nil || !strings.Contains(err.Error(), "has no owners, so version 1 cannot be changed") {
		t.Errorf("changing an immutable manifest: %v", err)
	}
}
