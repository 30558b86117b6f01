package enclave

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

// The command line refuses what it cannot run, naming the flag and the
// fix, before touching anything.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "usage: cloister-enclave supervise|orchestrator|probe|evidence"},
		{[]string{"boot"}, `unknown command "boot"`},
		{[]string{"supervise", "--backend", "kvm"}, `--backend "kvm": use nitro or sim`},
		{[]string{"orchestrator", "--listen", "vsock:x"}, "vsock:PORT takes a port number"},
		// A Nitro Enclave's orchestrator takes manifests its owner signed.
		{[]string{"orchestrator", "--listen", filepath.Join(t.TempDir(), "o.sock"), "--plugin-socket", filepath.Join(t.TempDir(), "p.sock")}, "its image must carry the owner's key"},
		{[]string{"probe", "alive"}, "usage: cloister-enclave probe started|ready"},
		{[]string{"evidence", "--nonce", "xyz"}, "--nonce: nonce \"xyz\": give 1 to 64 bytes in hex"},
	} {
		var out, errOut bytes.Buffer
		err := Run(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
	var errOut bytes.Buffer
	if err := Run(context.Background(), []string{"--help"}, &bytes.Buffer{}, &errOut); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "usage:") {
		t.Errorf("--help: %v, %q", err, errOut.String())
	}
}

// The probe reports a supervisor that is not there as a failure with the
// reason, which the kubelet puts in its event.
func TestProbeWithoutSupervisor(t *testing.T) {
	err := Run(context.Background(), []string{"probe", "ready", "--run-dir", t.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "asking the enclave supervisor") {
		t.Errorf("probe without a supervisor: %v", err)
	}
}
