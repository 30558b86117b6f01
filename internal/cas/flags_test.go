package cas

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/cas/seal"
)

// Every flag the CAS chart passes is one cloister-cas defines: a chart
// that passed another would leave the CAS pod crash-looping on "flag
// provided but not defined".
func TestChartPassesOnlyDefinedFlags(t *testing.T) {
	tmpl, err := os.ReadFile("../../charts/cas/templates/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
	(&Config{}).AddFlags(fs)
	args := regexp.MustCompile(`(?m)^\s*- --([a-z-]+)`).FindAllStringSubmatch(string(tmpl), -1)
	if len(args) < 4 {
		t.Fatalf("found %d flags in the chart", len(args))
	}
	for _, a := range args {
		if fs.Lookup(a[1]) == nil {
			t.Errorf("the CAS chart passes --%s, which cloister-cas does not define", a[1])
		}
	}
}

func TestStoreFlag(t *testing.T) {
	for _, bad := range []string{"etcd", "kubernetes:", "kubernetes:ns", "kubernetes:/cas", "kubernetes:ns/"} {
		_, _, err := openStore(t.Context(), Config{Store: bad, StateDir: t.TempDir()}, nil)
		if err == nil || !strings.Contains(err.Error(), "kubernetes:NAMESPACE/NAME") {
			t.Errorf("--store %s: %v", bad, err)
		}
	}
	// Outside a pod, a kubernetes store without a configuration says what
	// it lacks.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, _, err := openStore(t.Context(), Config{Store: "kubernetes:ns/cas"}, nil); err == nil || !strings.Contains(err.Error(), "service account") {
		t.Errorf("no service account: %v", err)
	}
	dir := t.TempDir()
	s, _, err := openStore(t.Context(), Config{Store: "bolt", StateDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	// A second CAS on a state the first still holds (one started while
	// the last drains) says so and stops, rather than panicking on a
	// store that is not there.
	err = Run(t.Context(), Config{StateDir: dir, Sealer: "none", Listen: "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "another CAS uses it") {
		t.Errorf("a locked state: %v", err)
	}
}

func TestSlotSealers(t *testing.T) {
	s, err := ParseSealer("sim-node:node-1", produce.Paths{})
	if slot, ok := s.(seal.SlotSealer); err != nil || !ok || slot.Node != "node-1" || !slot.Insecure() {
		t.Fatalf("sim-node: %#v %v", s, err)
	}
	if s, err := ParseSealer("snp-node:node-1", produce.Paths{}); err != nil || s.(seal.SlotSealer).Insecure() {
		t.Fatalf("snp-node: %#v %v", s, err)
	}
	if _, err := ParseSealer("sim-node:", produce.Paths{}); err == nil || !strings.Contains(err.Error(), "sim-node:NODE") {
		t.Errorf("sim-node without a node: %v", err)
	}
	// The simulated key is the simulation key's and the node's: another
	// node, or another simulation key, derives another.
	dir := t.TempDir()
	for _, sub := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	a, _, err := ownSimulationKey(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := ownSimulationKey(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	k1, err1 := simulatedSealingKey(a, "n1")()
	k1again, _ := simulatedSealingKey(a, "n1")()
	k2, _ := simulatedSealingKey(a, "n2")()
	k3, _ := simulatedSealingKey(b, "n1")()
	if err1 != nil || len(k1) != 32 || string(k1) != string(k1again) || string(k1) == string(k2) || string(k1) == string(k3) {
		t.Errorf("simulated sealing keys: %x %x %x %x %v", k1, k1again, k2, k3, err1)
	}
	// A slot of the state needs a state replicas share, and simulated
	// sealing needs simulation.
	for _, cfg := range []Config{{Sealer: "sim-node:n1", Simulation: true}, {Sealer: "sim-node:n1", Store: "kubernetes:ns/cas"}} {
		cfg.StateDir = t.TempDir()
		if err := Run(t.Context(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--sealer sim-node:n1") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

func TestBackupFlags(t *testing.T) {
	for _, tt := range []struct {
		cfg  BackupConfig
		says string
	}{
		{BackupConfig{Store: "kubernetes:ns/cas"}, "--dir is required"},
		{BackupConfig{Store: "bolt", Dir: t.TempDir()}, "kubernetes:NAMESPACE/NAME"},
		{BackupConfig{Store: "kubernetes:ns/cas", Dir: t.TempDir()}, "service account"},
	} {
		if err := Backup(t.Context(), tt.cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%+v: %v, want an error that says %q", tt.cfg, err, tt.says)
		}
	}
}

// With --host-env the host chooses the HostChosen flags, from their
// variables, and nothing else: a variable of another flag is never read,
// and a host-chosen flag also on the (measured) command line is refused.
func TestHostEnv(t *testing.T) {
	env := map[string]string{HostEnv("store"): "kubernetes:ns/cas", HostEnv("node"): "n1", HostEnv("tls-san"): "a,b",
		HostEnv("sealer"): "file:/tmp/seed", HostEnv("simulation"): "true", HostEnv("insecure-test-roots"): "/tmp/roots.pem"}
	parse := func(args ...string) (Config, error) {
		cfg, fs := Config{}, flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
		cfg.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return cfg, cfg.ApplyHostEnv(fs, func(k string) string { return env[k] })
	}
	cfg, err := parse("--tee", "--host-env", "--sealer=sgx-node")
	if err != nil || cfg.Store != "kubernetes:ns/cas" || cfg.Node != "n1" || !slices.Equal(cfg.TLSSANs, []string{"a", "b"}) ||
		cfg.Sealer != "sgx-node" || cfg.Simulation || cfg.TestRoots != "" {
		t.Errorf("--host-env: %+v %v", cfg, err)
	}
	if cfg, err := parse("--tee"); err != nil || cfg.Store != "bolt" || cfg.Node != "" {
		t.Errorf("without --host-env the environment was read: %+v %v", cfg, err)
	}
	if _, err := parse("--tee", "--host-env", "--store=bolt"); err == nil || !strings.Contains(err.Error(), HostEnv("store")) {
		t.Errorf("a host-chosen flag on the command line: %v", err)
	}
	// A value its flag does not take is refused by its variable.
	for _, bad := range []struct{ name, value string }{
		{"store", "kubernetes:NS/cas"}, {"node", "../n"}, {"peers", "Cas"}, {"tls-san", "a,b c"}, {"tls-san", strings.Repeat("a.", maxHostValue)},
		{"pcs", "file:///dev/attestation/keys/_sgx_mrenclave"}, {"kds", "https://user:pw@kds.example"},
	} {
		saved := env[HostEnv(bad.name)]
		env[HostEnv(bad.name)] = bad.value
		if _, err := parse("--tee", "--host-env"); err == nil || !strings.Contains(err.Error(), HostEnv(bad.name)) {
			t.Errorf("%s %.30q: %v", HostEnv(bad.name), bad.value, err)
		}
		env[HostEnv(bad.name)] = saved
	}
	if _, err := parse("--host-env"); err == nil || !strings.Contains(err.Error(), "--tee") {
		t.Errorf("--host-env outside an enclave: %v", err)
	}
	for _, name := range HostChosen {
		if strings.Contains(name, "sealer") || strings.Contains(name, "sim") || strings.HasSuffix(name, "-file") || strings.HasSuffix(name, "-dir") {
			t.Errorf("the host may choose --%s", name)
		}
	}
}

// The SGX node sealers keep the seed in a node's slot, under the
// enclave's key; without a node of their own, --node names it.
func TestSGXNodeSealers(t *testing.T) {
	for _, spec := range []string{"sgx-node:n1", "sgx-signer-node:n1"} {
		s, err := ParseSealer(spec, produce.Paths{})
		if slot, ok := s.(seal.SlotSealer); err != nil || !ok || slot.Node != "n1" || slot.Insecure() {
			t.Errorf("%s: %#v %v", spec, s, err)
		}
	}
	cfg := Config{Sealer: "sgx-node", Store: "kubernetes:ns/cas"}
	if _, err := sealerFor(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--node") {
		t.Errorf("sgx-node without --node: %v", err)
	}
	cfg.Node = "n2"
	if s, err := sealerFor(cfg, slog.New(slog.DiscardHandler)); err != nil || s.(seal.SlotSealer).Node != "n2" {
		t.Errorf("sgx-node with --node n2: %#v %v", s, err)
	}
	for _, bad := range []string{"../n", "N1", strings.Repeat("n", 300)} {
		cfg.Node = bad
		if _, err := sealerFor(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "is not a node's name") {
			t.Errorf("sgx-node with --node %.20q: %v", bad, err)
		}
	}
	cfg.Node, cfg.Store = "n2", "bolt"
	if _, err := sealerFor(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "kubernetes:NAMESPACE/NAME") {
		t.Errorf("sgx-node on a bolt store: %v", err)
	}
}

// Whatever the host sets, ApplyHostEnv takes it or refuses it by its
// variable: it never panics, never sets a flag the host does not choose,
// and what it takes passes the value's checks.
func FuzzApplyHostEnv(f *testing.F) {
	f.Add("kubernetes:ns/cas", "node-1", "cas.ns.svc,10.0.0.1", "cas", "https://api.trustedservices.intel.com", "https://kdsintf.amd.com")
	f.Add("kubernetes:/", "", ",", "-", "http://", "https://[::1")
	f.Fuzz(func(t *testing.T, store, node, sans, peers, pcs, kds string) {
		env := map[string]string{HostEnv("store"): store, HostEnv("node"): node, HostEnv("tls-san"): sans, HostEnv("peers"): peers,
			HostEnv("pcs"): pcs, HostEnv("kds"): kds, HostEnv("sealer"): store, HostEnv("simulation"): "true"}
		cfg, fs := Config{}, flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
		cfg.AddFlags(fs)
		if err := fs.Parse([]string{"--tee", "--host-env", "--sealer=sgx-node"}); err != nil {
			t.Fatal(err)
		}
		err := cfg.ApplyHostEnv(fs, func(k string) string { return env[k] })
		if cfg.Sealer != "sgx-node" || cfg.Simulation {
			t.Fatalf("the host set %+v", cfg)
		}
		if err != nil {
			if !strings.Contains(err.Error(), HostEnvPrefix) {
				t.Fatalf("an error that names no variable: %v", err)
			}
			return
		}
		for name, v := range map[string]string{"store": cfg.Store, "node": cfg.Node, "peers": cfg.Peers, "pcs": cfg.PCS, "kds": cfg.KDS} {
			if v != "" && checkHostValue(name, v) != nil {
				t.Fatalf("took %s %q", name, v)
			}
		}
	})
}
