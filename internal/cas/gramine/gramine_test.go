package gramine_test

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/gramine"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// manifest is what Gramine's loader takes from a rendered manifest.
type manifest struct {
	Libos  struct{ Entrypoint string }
	Loader struct {
		Argv                    []string
		Env                     map[string]any
		UID, GID                int
		InsecureUseCmdlineArgv  *bool `toml:"insecure__use_cmdline_argv"`
		InsecureUseHostEnv      *bool `toml:"insecure__use_host_env"`
		InsecureDisableASLR     *bool `toml:"insecure__disable_aslr"`
		ArgvSrcFile, EnvSrcFile string
	}
	Sys struct {
		InsecureAllowEventfd *bool `toml:"insecure__allow_eventfd"`
	}
	FS struct {
		Mounts []struct{ Type, Path, URI string }
	} `toml:"fs"`
	SGX struct {
		Debug             bool
		RemoteAttestation string `toml:"remote_attestation"`
		EnclaveSize       string `toml:"enclave_size"`
		ISVProdID         int
		TrustedFiles      []string `toml:"trusted_files"`
		AllowedFiles      []string `toml:"allowed_files"`
		FileCheckPolicy   string   `toml:"file_check_policy"`
	} `toml:"sgx"`
}

// render does what gramine-manifest does with the template: its Jinja
// expressions, for one sealing.
func render(t *testing.T, s gramine.Sealing) manifest {
	t.Helper()
	text := strings.NewReplacer(
		"{{ sealer }}", s.Sealer,
		"{{ gramine.libos }}", "/usr/lib/x86_64-linux-gnu/gramine/libsysdb.so",
		"{{ gramine.runtimedir() }}", "/usr/lib/x86_64-linux-gnu/gramine/runtime/glibc",
	).Replace(string(gramine.Template))
	if strings.Contains(text, "{{") {
		t.Fatalf("the template has an expression gramine-manifest would need a value for:\n%s", text)
	}
	var m manifest
	md, err := toml.Decode(text, &m)
	if err != nil {
		t.Fatal(err)
	}
	// A key the loader reads that this test does not know is one it does
	// not check.
	for _, k := range md.Undecoded() {
		switch k.String() {
		case "loader.entrypoint.uri", "loader.log_level", "sys.enable_sigterm_injection", "sys.enable_extra_runtime_domain_names_conf",
			"sys.disallow_subprocesses", "sgx.isvsvn", "sgx.max_threads":
		default:
			if !strings.HasPrefix(k.String(), "loader.env.") {
				t.Errorf("the manifest sets %s, which this test does not check", k)
			}
		}
	}
	return m
}

// passthrough are the variables the host may set in the enclave.
func (m manifest) passthrough() []string {
	var names []string
	for name, v := range m.Loader.Env {
		if tbl, ok := v.(map[string]any); ok && tbl["passthrough"] == true {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// The manifest fixes CAS's whole command line to a TEE CAS that seals as
// its name says, with no simulation and no test roots, and lets the host
// set exactly the variables of the flags CAS leaves to the host (and the
// API's address): nothing insecure, nothing unmeasured but the state.
func TestManifestFixesWhatCASTrusts(t *testing.T) {
	for _, s := range []gramine.Sealing{gramine.SealToMRENCLAVE, gramine.SealToMRSIGNER} {
		m := render(t, s)
		if m.Libos.Entrypoint != "/usr/local/bin/cloister-cas" || len(m.Loader.Argv) == 0 || m.Loader.Argv[0] != m.Libos.Entrypoint {
			t.Fatalf("%s runs %s %v", s.Manifest, m.Libos.Entrypoint, m.Loader.Argv)
		}
		cfg, fs := cas.Config{}, flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
		cfg.AddFlags(fs)
		if err := fs.Parse(m.Loader.Argv[1:]); err != nil || fs.NArg() > 0 {
			t.Fatalf("%s's command line: %v %v", s.Manifest, err, fs.Args())
		}
		if !cfg.TEE || !cfg.HostEnv || cfg.Simulation || cfg.Sealer != s.Sealer || cfg.StateDir != gramine.StateDir || cfg.TestRoots != "" || cfg.SimKeys != "" || cfg.SimulationKeyFile != "" || cfg.CollateralDir != "" {
			t.Errorf("%s runs CAS with %+v", s.Manifest, cfg)
		}
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(cas.HostChosen, f.Name) {
				t.Errorf("%s fixes --%s, which the host chooses", s.Manifest, f.Name)
			}
		})
		want := []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
		for _, f := range cas.HostChosen {
			want = append(want, cas.HostEnv(f))
		}
		slices.Sort(want)
		if got := m.passthrough(); !slices.Equal(got, want) {
			t.Errorf("%s passes %v through from the host, want %v", s.Manifest, got, want)
		}
		l := m.Loader
		if l.InsecureUseCmdlineArgv != nil || l.InsecureUseHostEnv != nil || l.InsecureDisableASLR != nil || l.ArgvSrcFile != "" || l.EnvSrcFile != "" || m.Sys.InsecureAllowEventfd != nil {
			t.Errorf("%s takes its command line or environment elsewhere, or is insecure: %+v %+v", s.Manifest, l, m.Sys)
		}
		if l.UID == 0 || l.GID == 0 {
			t.Errorf("%s runs CAS as root in the enclave", s.Manifest)
		}
		x := m.SGX
		if x.Debug || x.RemoteAttestation != "dcap" || x.FileCheckPolicy != "" || x.ISVProdID == 0 {
			t.Errorf("%s: sgx %+v", s.Manifest, x)
		}
		if size, err := parseSize(x.EnclaveSize); err != nil || size != gramine.EnclaveSize {
			t.Errorf("%s: the enclave is %s (%v), the CAS pod asks for %d bytes of EPC", s.Manifest, x.EnclaveSize, err, gramine.EnclaveSize)
		}
		if !slices.Contains(x.TrustedFiles, "file:"+m.Libos.Entrypoint) || !slices.Contains(x.TrustedFiles, "file:/etc/ssl/certs/ca-certificates.crt") {
			t.Errorf("%s does not measure CAS or its CA bundle: %v", s.Manifest, x.TrustedFiles)
		}
		for _, f := range x.AllowedFiles {
			if strings.Contains(f, "/usr/local/bin") || strings.Contains(f, "/etc/ssl") || f == "file:/" {
				t.Errorf("%s lets the host change %s", s.Manifest, f)
			}
		}
		if !slices.ContainsFunc(m.FS.Mounts, func(mt struct{ Type, Path, URI string }) bool { return mt.Path == gramine.StateDir }) {
			t.Errorf("%s does not mount the state folder %s", s.Manifest, gramine.StateDir)
		}
	}
}

// parseSize reads a Gramine size ("1G").
func parseSize(s string) (int64, error) {
	units := map[string]int64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
	if n := len(s); n > 1 && units[s[n-1:]] != 0 {
		v, err := strconv.ParseInt(s[:n-1], 10, 64)
		return v * units[s[n-1:]], err
	}
	return 0, fmt.Errorf("%q is not a Gramine size", s)
}

// Gramine's loader, here: the manifest's command line, and the host's
// variables where the manifest passes them through, none other.
func loadCAS(t *testing.T, m manifest, host map[string]string, testOnly ...string) cas.Config {
	t.Helper()
	cfg, fs := cas.Config{}, flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(append(slices.Clone(m.Loader.Argv[1:]), testOnly...)); err != nil {
		t.Fatal(err)
	}
	pass := m.passthrough()
	if err := cfg.ApplyHostEnv(fs, func(name string) string {
		if !slices.Contains(pass, name) {
			return ""
		}
		return host[name]
	}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// CAS as the manifest runs it, in a (fake) SGX enclave, on the
// Kubernetes API: a client that trusts the CAS resource by spec.sgx
// (the operator, cloister --cluster) trusts it by its MRENCLAVE alone;
// restarted on its node it unseals its seed from the node's slot with no
// owner acting, and not on another node; on CAS's node, a new version
// (another MRENCLAVE, the same signer) unseals it only with sealing
// MRSIGNER, and another signer's enclave never.
func TestCASRunsAsTheManifestSays(t *testing.T) {
	for _, tc := range []struct {
		sealing      servicesv1beta1.CASEnclaveSealing
		manifest     gramine.Sealing
		upgradeOpens bool
	}{
		{servicesv1beta1.CASSealToMRENCLAVE, gramine.SealToMRENCLAVE, false},
		{servicesv1beta1.CASSealToMRSIGNER, gramine.SealToMRSIGNER, true},
	} {
		t.Run(string(tc.sealing), func(t *testing.T) {
			m := render(t, tc.manifest)
			dir := t.TempDir()
			machine := producetest.NewSGXMachine(t, dir)
			ns := namespace(t)
			casCR := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Name: "cas", Namespace: ns}, Spec: servicesv1beta1.CASSpec{
				SGX: &servicesv1beta1.CASSGX{MREnclave: strings.Repeat("ca", 32), Sealing: tc.sealing}}}
			host := map[string]string{
				cas.HostEnv("store"): "kubernetes:" + ns + "/cas", cas.HostEnv("node"): "node-a", cas.HostEnv("tls-san"): "cas." + ns + ".svc",
				// Not passed through: Gramine drops it, and CAS never reads it.
				"CLOISTER_CAS_SIMULATION": "true",
			}
			state := filepath.Join(dir, "state")
			if err := os.Mkdir(state, 0o700); err != nil {
				t.Fatal(err)
			}
			start := func(name string, mr, signer byte, node string) (string, func()) {
				t.Helper()
				h := maps.Clone(host)
				h[cas.HostEnv("node")] = node
				guest := machine.EnclavePaths(t, filepath.Join(dir, name), mr, signer)
				// Test only: the fake enclave, its test roots and
				// collateral, the folders of this test, no wait to stop.
				cfg := loadCAS(t, m, h, "--gramine="+guest.Gramine, "--insecure-test-roots="+machine.Roots,
					"--collateral-dir="+machine.Collateral, "--state-dir="+state, "--init-token-file=", "--drain-delay=0")
				if cfg.Store != "kubernetes:"+ns+"/cas" || cfg.Node != node || cfg.Simulation || !slices.Equal(cfg.TLSSANs, []string{"cas." + ns + ".svc"}) {
					t.Fatalf("the host's variables gave CAS %+v", cfg)
				}
				cfg.KubeConfig = envConfig
				url, _, stop := castest.StartConfig(t, cfg)
				return url, stop
			}
			expect := func() casclient.Expect {
				e := conn.Expect(casCR)
				e.Verify.TestRoots = []*x509.Certificate{machine.Root()}
				return e
			}
			connect := func(url string) (*casclient.Client, error) {
				c, _, err := casclient.NewAttested(context.Background(), url, expect(), nil)
				return c, err
			}
			stateOf := func(url string) string {
				t.Helper()
				return castest.StateTrusted(t, url, expect())
			}

			url, stop := start("cas", 0xca, 0x51, "node-a")
			c, err := connect(url)
			if err != nil {
				t.Fatalf("trusting CAS by spec.sgx: %v", err)
			}
			owner, _ := policy.NewKey()
			if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(t, state), castest.BoardPEM()); err != nil {
				t.Fatal(err)
			}
			stop()
			// Another enclave: the client refuses it by its MRENCLAVE.
			url, stop = start("impostor", 0xcb, 0x51, "node-a")
			if _, err := connect(url); err == nil || !strings.Contains(err.Error(), "MRENCLAVE") {
				t.Errorf("a client trusting spec.sgx trusts another enclave: %v", err)
			}
			stop()
			url, stop = start("cas-again", 0xca, 0x51, "node-a")
			if s := stateOf(url); s != string(wire.Ready) {
				t.Errorf("restarted on its node: %s, want it unsealed and ready", s)
			}
			stop()
			url, stop = start("cas-elsewhere", 0xca, 0x51, "node-b")
			if s := stateOf(url); s == string(wire.Ready) {
				t.Errorf("on another node: %s: it unsealed the seed", s)
			}
			stop()
			for _, o := range []struct {
				name       string
				mr, signer byte
				opens      bool
			}{{"upgrade", 0xcc, 0x51, tc.upgradeOpens}, {"stranger", 0xcd, 0x52, false}} {
				url, stop = start(o.name, o.mr, o.signer, "node-a")
				// Trusted by its own MRENCLAVE, to read its state.
				casCR.Spec.SGX.MREnclave = strings.Repeat(fmt.Sprintf("%02x", o.mr), 32)
				if s := stateOf(url); (s == string(wire.Ready)) != o.opens {
					t.Errorf("%s (MRENCLAVE %x, signer %x) on CAS's node: %s, want it to unseal the seed: %v", o.name, o.mr, o.signer, s, o.opens)
				}
				stop()
			}
		})
	}
}

func namespace(t *testing.T) string {
	t.Helper()
	c, err := client.New(envConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gramine-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
