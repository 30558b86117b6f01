package cli

import (
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// A CAS in a (fake) SGX enclave proves itself with the enclave's DCAP
// quote and passes on the Intel collateral that judges it: `cloister cas
// init` trusts it by its MRENCLAVE alone, with no simulation and no
// collateral of its own; CAS seals its seed with the enclave's sealing key
// and a restart unseals it with no owner acting; the same state in an
// enclave of another MRENCLAVE cannot unseal it and waits for its owners.
func TestCASInAnSGXEnclave(t *testing.T) {
	dir := t.TempDir()
	machine := producetest.NewSGXMachine(t, dir)
	roots := machine.Roots
	enclave := func(name string, mr byte) produce.Paths {
		return machine.EnclavePaths(t, filepath.Join(dir, name, "attestation"), mr, 0x51)
	}
	state := filepath.Join(dir, "state")
	start := func(guest produce.Paths) (string, func()) {
		url, _, stop := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "sgx:" + filepath.Join(state, "sealed-seed"), TEE: true,
			Guest: guest, CollateralDir: filepath.Join(dir, "collateral"), TestRoots: roots})
		return url, stop
	}
	url, stop := start(enclave("cas", 0xca))
	identity := writeFile(t, dir, "cas-identity.yaml", "identities: [{type: sgx, mrenclave: "+strings.Repeat("ca", 32)+"}]\n")
	other := writeFile(t, dir, "other.yaml", "identities: [{type: sgx, mrenclave: "+strings.Repeat("cb", 32)+"}]\n")
	_, pub := keygen(t, dir, "owner.pem")
	owner := writeFile(t, dir, "owner.pub.pem", pub)
	base := []string{"cas", "init", "--cas", url, "--recovery-owner", owner, "--init-token-file", filepath.Join(state, cas.InitTokenFile), "--out", filepath.Join(dir, "shares.json")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cas-identity", identity}, "chain"},
		{[]string{"--cas-identity", other, "--insecure-test-roots", roots}, "MRENCLAVE is caca"},
	} {
		if _, _, err := run(t, append(base, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, stderr, err := run(t, append(base, "--cas-identity", identity, "--insecure-test-roots", roots)...); err != nil {
		t.Fatalf("cas init trusting the enclave by its MRENCLAVE: %v\n%s", err, stderr)
	} else if !strings.Contains(stderr, "sgx evidence that chains to a test root") || strings.Contains(stderr, "simulated") {
		t.Errorf("stderr: %s", stderr)
	}
	stateOf := func(url string) string {
		t.Helper()
		// Trusted by the enclave's quote, as the CLI does.
		expect := casclient.Expect{}
		expect.Verify.TestRoots = []*x509.Certificate{machine.Root()}
		return castest.StateTrusted(t, url, expect)
	}
	stop()
	url, stop = start(enclave("cas-again", 0xca))
	if s := stateOf(url); s != string(wire.Ready) {
		t.Errorf("restarted in the same enclave: %s, want it unsealed and ready", s)
	}
	stop()
	url, stop = start(enclave("another", 0xcb))
	if s := stateOf(url); s == string(wire.Ready) {
		t.Errorf("the state in another enclave: %s: it unsealed the seed", s)
	}
	stop()
}
