package initializer

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/las"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	"github.com/cloister-cc/cloister/internal/las/aesm/aesmtest"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// The premain in an SGX enclave (Gramine's /dev/attestation, faked with
// FUSE): it attests with the enclave's own quote to a CAS that pins the
// enclave's MRENCLAVE, writes the secret inside the enclave's folder and
// becomes the application with the policy's env; an enclave of another
// MRENCLAVE is refused, the mismatch named, and runs nothing.
func TestSGXPremain(t *testing.T) {
	dir := t.TempDir()
	machine := producetest.NewSGXMachine(t, dir)
	signer, roots := machine.SGXSigner, machine.Roots
	state := filepath.Join(dir, "state")
	url, admin := initializedCAS(t, cas.Config{StateDir: state, Sealer: "none", Simulation: true, SimKeys: castest.LASPubFile(t),
		CollateralDir: filepath.Join(dir, "collateral"), TestRoots: roots})
	mrenclave := strings.Repeat("e7", 32)
	sgxManifest := strings.NewReplacer("allowSimulation: true\n", "",
		"attestation: {identities: []}", "attestation: {identities: [{type: sgx, mrenclave: '"+mrenclave+"'}]}",
		"secrets: [ws]", "secrets: [ws]\n  env: {API_TOKEN: \"{{ .Secrets.ws.Hex }}\"}").Replace(manifest)
	if _, err := admin.RegisterPolicy(context.Background(), boardApproved(t, sgxManifest)); err != nil {
		t.Fatal(err)
	}
	enclaveOf := func(name string, mr byte, remote string) string {
		d := filepath.Join(dir, name, "attestation")
		producetest.MountGramine(t, d, &producetest.GramineFS{Signer: signer, Body: producetest.EnclaveBody(mr, 0x51), RemoteAttestation: remote, CPU: producetest.NewCPU()})
		return d
	}
	enclave := func(name string, mr byte) string { return enclaveOf(name, mr, "dcap") }
	var execed struct {
		path string
		argv []string
		env  []string
	}
	orig := execve
	execve = func(path string, argv, env []string) error {
		execed.path, execed.argv, execed.env = path, argv, env
		return nil
	}
	t.Cleanup(func() { execve = orig })
	t.Setenv(initenv.EnvEvidence, initenv.EvidenceSGX) // dropped before the application starts
	lasURL := ""
	run := func(gramine, want string) (string, *testenv.Buffer, error) {
		cfg := Config{CAS: strings.TrimPrefix(url, "https://"), LAS: lasURL, Expect: `{"allowSimulation":true}`, SimKey: casSimKey(t, state),
			Policy: "shop", Service: "shop-deployment-web", PolicyOwners: initenv.NoOwners, Evidence: initenv.EvidenceSGX,
			Guest: producetestPaths(gramine), Out: filepath.Join(filepath.Dir(gramine), "run"), Exec: []string{"true", "--serve"},
			MinRetry: 20 * time.Millisecond, MaxRetry: 50 * time.Millisecond}
		logs, err := runUntil(cfg, want)
		return cfg.Out, logs, err
	}

	out, logs, err := run(enclave("app", 0xe7), "")
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	secret, err := os.ReadFile(filepath.Join(out, "files", "workload-secret"))
	if err != nil || len(secret) == 0 {
		t.Fatalf("the secret inside the enclave: %v", err)
	}
	if info, _ := os.Stat(filepath.Join(out, "key.pem")); info == nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the premain's key is shared: %v", info)
	}
	if !strings.HasSuffix(execed.path, "/true") || strings.Join(execed.argv, " ") != "true --serve" {
		t.Errorf("exec %s %v", execed.path, execed.argv)
	}
	env := strings.Join(execed.env, "\n")
	if !strings.Contains(env, "API_TOKEN="+string(secret)) || strings.Contains(env, initenv.EnvEvidence) {
		t.Errorf("the application's environment:\n%s", env)
	}

	execed.path = ""
	_, logs, err = run(enclave("other", 0xe8), "MRENCLAVE is e8e8")
	if err == nil || execed.path != "" {
		t.Errorf("another enclave: %v, ran %q\n%s", err, execed.path, logs)
	}

	// Gramine without remote attestation: the enclave's REPORT goes to
	// its node's LAS, which has the quoting enclave (a fake AESM) quote
	// it, and CAS takes that quote as it takes Gramine's.
	sock, _ := aesmtest.Start(t, signer)
	srv := httptest.NewServer((&las.Server{Probe: &las.Probe{DevRoot: t.TempDir()}, DCAP: &las.DCAP{Client: &aesm.Client{Socket: sock}}}).Handler())
	t.Cleanup(srv.Close)
	lasURL = srv.URL
	if _, logs, err = run(enclaveOf("reported", 0xe7, "none"), ""); err != nil || !strings.HasSuffix(execed.path, "/true") {
		t.Errorf("the REPORT quoted by LAS: %v, ran %q\n%s", err, execed.path, logs)
	}
}

func producetestPaths(gramine string) produce.Paths { return produce.Paths{Gramine: gramine} }

func TestExecArgs(t *testing.T) {
	for _, tc := range []struct {
		premain bool
		args    []string
		want    string // "" accepts
	}{
		{true, []string{"/app/server", "--port", "8443"}, ""},
		{false, nil, ""},
		{true, nil, "name the application after --"},
		{false, []string{"/bin/sh"}, "without --exec"},
	} {
		got, err := ExecArgs(tc.premain, tc.args)
		if tc.want == "" {
			if err != nil || len(got) != len(tc.args) {
				t.Errorf("%v %v: %v %v", tc.premain, tc.args, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: %v, want %q", tc.premain, tc.args, err, tc.want)
		}
	}
}
