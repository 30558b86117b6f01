package cli

import (
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
)

// A CAS in a (fake) confidential VM proves itself with the VM's own SEV-SNP
// evidence binding its TLS key: `cloister cas init` trusts it by that
// evidence, with no simulation anywhere, once told to trust the fake's test
// roots; without them, or expecting another measurement, it refuses.
func TestCASInAConfidentialVMProvesItself(t *testing.T) {
	dir := t.TempDir()
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Measurement[0], s.Measurement[47] = 0xCA, 0x5E
	s.HostData[0] = 0xCA // CAS's own pod policy
	tsm := s.ServeVM(t, filepath.Join(dir, "tsm"), nil, nil)
	roots := writeFile(t, dir, "roots.pem", string(s.RootsPEM()))
	state := filepath.Join(dir, "state")
	url, _, _ := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none", TEE: true,
		Guest: producetest.GuestPaths(tsm)})
	id := func(measurement [48]byte, hostData [32]byte) string {
		return "identities: [{type: snp, measurement: " + hex.EncodeToString(measurement[:]) + ", hostData: " + hex.EncodeToString(hostData[:]) + "}]\n"
	}
	identity := writeFile(t, dir, "cas-identity.yaml", id(s.Measurement, s.HostData))
	other := s.Measurement
	other[1] = 1
	otherIdentity := writeFile(t, dir, "other.yaml", id(other, s.HostData))
	// A pod of CAS's runtime class (the same measurement) with a policy of
	// its own (another host data) answering as CAS: refused.
	impostor := *s
	impostor.HostData[0] = 0xBA
	impostorURL, _, _ := castest.StartConfig(t, cas.Config{StateDir: filepath.Join(dir, "impostor"), Sealer: "none", TEE: true,
		Guest: producetest.GuestPaths(impostor.ServeVM(t, filepath.Join(dir, "impostor-tsm"), nil, nil))})
	measurementOnly := writeFile(t, dir, "measurement-only.yaml", "identities: [{type: snp, measurement: "+hex.EncodeToString(s.Measurement[:])+"}]\n")
	_, pub := keygen(t, dir, "owner.pem")
	owner := writeFile(t, dir, "owner.pub.pem", pub)
	base := []string{"cas", "init", "--cas", url, "--recovery-owner", owner, "--init-token-file", filepath.Join(state, cas.InitTokenFile), "--out", filepath.Join(dir, "shares.json")}
	if _, _, err := run(t, "cas", "init", "--cas", impostorURL, "--cas-identity", identity, "--insecure-test-roots", roots, "--recovery-owner", owner,
		"--init-token-file", filepath.Join(dir, "impostor", cas.InitTokenFile), "--out", filepath.Join(dir, "impostor-shares.json")); err == nil || !strings.Contains(err.Error(), "host data is") {
		t.Errorf("a pod of CAS's runtime class with another policy: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cas-identity", identity}, "chain"},
		{[]string{"--cas-identity", measurementOnly, "--insecure-test-roots", roots}, "without hostData: every pod of its runtime class meets it"},
		{[]string{"--cas-identity", otherIdentity, "--insecure-test-roots", roots}, "identity"},
		{[]string{"--cas-identity", identity, "--insecure-simulated-cas", "--insecure-test-roots", roots}, "--cas-sim-key"},
	} {
		if _, _, err := run(t, append(base, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	out, stderr, err := run(t, append(base, "--cas-identity", identity, "--insecure-test-roots", roots)...)
	if err != nil {
		t.Fatalf("cas init trusting the VM's evidence: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "INSECURE") || !strings.Contains(stderr, "snp evidence that chains to a test root") || strings.Contains(stderr, "simulated") {
		t.Errorf("stderr: %s", stderr)
	}
	t.Log(out)
}
