package cas_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
)

// A CAS told it runs in a confidential VM does not start without the VM's
// evidence (it would otherwise serve unattested), nor with simulation.
func TestTEEFailsClosed(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		cfg  cas.Config
		want string
	}{
		{cas.Config{StateDir: filepath.Join(dir, "a"), TEE: true, Guest: produce.Paths{TSM: missing, SEVGuest: missing, TDXGuest: missing, NSM: missing}}, "--tee: no evidence producer"},
		{cas.Config{StateDir: filepath.Join(dir, "b"), TEE: true, Simulation: true}, "exclude each other"},
		{cas.Config{StateDir: filepath.Join(dir, "c"), TestRoots: missing}, "--insecure-test-roots"},
	} {
		tc.cfg.Listen = "127.0.0.1:0"
		err := cas.Run(context.Background(), tc.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// In a confidential VM CAS's TLS key stays in memory: a key on the volume
// beside evidence that vouches for it would let whoever reads the volume
// (the node's root) answer as CAS. One left there by a CAS run outside a
// VM is removed, and each start has a key of its own.
func TestTEEKeyStaysInTheVM(t *testing.T) {
	dir := t.TempDir()
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tsm := s.ServeVM(t, filepath.Join(dir, "tsm"), nil, nil)
	state := filepath.Join(dir, "state")
	_, _, stop := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none"})
	stop()
	if _, err := os.Stat(filepath.Join(state, cas.TLSKeyFile)); err != nil {
		t.Fatalf("outside a VM the key is kept: %v", err)
	}
	var certs []string
	for range 2 {
		_, ca, stop := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none", TEE: true, Guest: producetest.GuestPaths(tsm)})
		stop()
		if _, err := os.Stat(filepath.Join(state, cas.TLSKeyFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("in a VM the TLS key is on the volume: %v", err)
		}
		raw, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, string(raw))
	}
	if certs[0] == certs[1] {
		t.Error("two starts in a VM share a TLS key")
	}
}

// SEV-SNP's derived key covers the launch measurement, not the host data:
// in a VM that carries host data (a pod's, of a runtime class other pods
// share) CAS refuses to seal with it, since a privileged pod of the class
// would derive the same key and open the seed from any copy of the state;
// in a VM of CAS's own (no host data) it may.
func TestDerivedKeySealerOnlyInCASsOwnVM(t *testing.T) {
	dir := t.TempDir()
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	roots := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(roots, s.RootsPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	podVM := s.ServeVM(t, filepath.Join(dir, "pod-vm"), []byte{0xCA}, nil)
	cfg := cas.Config{StateDir: filepath.Join(dir, "state"), Sealer: "snp:" + filepath.Join(dir, "sealed"), TEE: true, Guest: producetest.GuestPaths(podVM), TestRoots: roots, Listen: "127.0.0.1:0"}
	err = cas.Run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "carries host data") {
		t.Errorf("an SEV-SNP sealer in a pod's VM: %v", err)
	}
	ownVM := s.ServeVM(t, filepath.Join(dir, "own-vm"), nil, nil)
	cfg.Guest = producetest.GuestPaths(ownVM)
	sealer, err := cas.ParseSealer(cfg.Sealer, produce.Paths{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cas.DerivedKeyFits(context.Background(), cfg, sealer, s.Roots()); err != nil {
		t.Errorf("an SEV-SNP sealer in CAS's own VM: %v", err)
	}
}

// The sgx sealer opens the seed only in the enclave that sealed it; the
// sgx-signer sealer in any enclave of the same signer (an upgrade), and in
// no other signer's.
func TestSGXSealers(t *testing.T) {
	dir := t.TempDir()
	signer, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cpu := producetest.NewCPU()
	enclave := func(name string, mr, signedBy byte) produce.Paths {
		d := filepath.Join(dir, name)
		producetest.MountGramine(t, d, &producetest.GramineFS{Signer: signer, Body: producetest.EnclaveBody(mr, signedBy), RemoteAttestation: "dcap", CPU: cpu})
		return produce.Paths{Gramine: d}
	}
	v1, v2, stranger := enclave("v1", 1, 0xaa), enclave("v2", 2, 0xaa), enclave("stranger", 3, 0xbb)
	seed := []byte("the root seed of this CAS, 32 b.")
	for _, tc := range []struct {
		spec, name string
		v2Opens    bool
	}{
		{spec: "sgx:", v2Opens: false, name: "mrenclave"},
		{spec: "sgx-signer:", v2Opens: true, name: "mrsigner"},
	} {
		path := filepath.Join(dir, tc.name+".sealed")
		s1, err := cas.ParseSealer(tc.spec+path, v1)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Seal(seed); err != nil {
			t.Fatal(err)
		}
		if got, err := s1.Unseal(); err != nil || string(got) != string(seed) {
			t.Errorf("%s: the sealing enclave: %q %v", tc.spec, got, err)
		}
		for _, other := range []struct {
			guest produce.Paths
			opens bool
			what  string
		}{{v2, tc.v2Opens, "the next version"}, {stranger, false, "another signer's enclave"}} {
			s, err := cas.ParseSealer(tc.spec+path, other.guest)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Unseal()
			if opened := err == nil && string(got) == string(seed); opened != other.opens {
				t.Errorf("%s: %s opens the seed: %v (%v), want %v", tc.spec, other.what, opened, err, other.opens)
			}
		}
	}
}
