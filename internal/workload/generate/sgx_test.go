package generate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

const sgxShop = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata:
      labels: {app: api}
      annotations: {sgx.cloister.dev/enclave-size: 512M}
    spec:
      runtimeClassName: cloister-cc # an enclave, says generate --reference-values sgx
      containers:
      - name: api
        image: registry.example/api:v2
        env: [{name: PORT, value: "8443"}, {name: CLOISTER_CAS, value: elsewhere:1}]
`

func sgxOptions() Options {
	o := options()
	o.RuntimeClass, o.OverheadMiB, o.SGX = "", 0, true
	o.CASExpect = `{"identities":[{"type":"sgx","mrenclave":"` + strings.Repeat("ca", 32) + `"}]}`
	o.PolicyOwners, o.PolicyOwnerThreshold = "SHA256:owner", "1"
	return o
}

// An SGX pod keeps its node's runtime and gets the enclave device, its
// enclave's EPC, the node's AESM folder and where CAS and LAS are; it has
// no initializer container and no VM policy, and a second run changes
// nothing.
func TestSGXPodRewritten(t *testing.T) {
	out, res := rewrite(t, sgxShop, sgxOptions())
	var d appsv1.Deployment
	doc(t, out, 0, &d)
	pod := d.Spec.Template.Spec
	if pod.RuntimeClassName != nil || len(pod.InitContainers) != 0 {
		t.Errorf("runtime class %v, init containers %+v", pod.RuntimeClassName, pod.InitContainers)
	}
	if a := d.Spec.Template.Annotations; a[EnclaveAnnotation] != "api" || a[podpolicy.Annotation] != "" || a[EnclaveSizeAnnotation] != "512M" {
		t.Errorf("annotations %v", a)
	}
	c := pod.Containers[0]
	if c.Image != "registry.example/api@"+sha('b') {
		t.Errorf("image %s", c.Image)
	}
	epc := c.Resources.Limits[tee.SGXEPC]
	dev := c.Resources.Limits[tee.SGXEnclave]
	if epc.Value() != 512<<20 || dev.Value() != 1 {
		t.Errorf("limits %v", c.Resources.Limits)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env[initenv.EnvCAS].Value != "cas.default.svc:8081" || env["PORT"].Value != "8443" || env[laswire.EnvNodeIP].ValueFrom == nil || len(c.Env) != 4 {
		t.Errorf("env %+v", c.Env)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/var/run/aesmd" || !c.VolumeMounts[0].ReadOnly ||
		len(pod.Volumes) != 1 || pod.Volumes[0].HostPath == nil || pod.Volumes[0].HostPath.Path != "/var/run/aesmd" {
		t.Errorf("AESM mount %+v, volumes %+v", c.VolumeMounts, pod.Volumes)
	}
	if len(res.Workloads) != 1 || res.Workloads[0].Enclave == nil || res.Workloads[0].Enclave.Size != 512<<20 || res.Workloads[0].Digest != "" {
		t.Errorf("workloads %+v", res.Workloads)
	}
	if again, _ := rewrite(t, out, sgxOptions()); again != out {
		t.Errorf("a second run changed:\n%s\nto\n%s", out, again)
	}
	found, err := Inspect([]byte(out))
	if err != nil || len(found.Workloads) != 1 || found.Workloads[0].Enclave == nil || found.Workloads[0].Enclave.Container != "api" {
		t.Fatalf("inspect: %+v %v", found, err)
	}
	// Generated for sgx, the pod is no VM's: a VM platform refuses it.
	if _, _, err := Rewrite(context.Background(), []byte(out), options()); err == nil || !strings.Contains(err.Error(), "--reference-values sgx") {
		t.Errorf("a VM platform took the SGX pod: %v", err)
	}
}

func TestSGXPodRefuses(t *testing.T) {
	twoContainers := strings.Replace(sgxShop, "      containers:\n", "      containers:\n      - {name: log, image: postgres:17}\n", 1)
	for _, tc := range []struct {
		name, in string
		opts     func(*Options)
		want     string
	}{
		{"a size that is no power of two", strings.Replace(sgxShop, "512M", "300M", 1), nil, "power of two"},
		{"a size that is no size", strings.Replace(sgxShop, "512M", "lots", 1), nil, "sgx.enclave_size"},
		{"two containers, neither named", twoContainers, nil, "name the one that runs the enclave"},
		{"a container that is not there", strings.Replace(sgxShop, "{sgx.cloister.dev/enclave-size: 512M}", "{sgx.cloister.dev/enclave: db}", 1), nil, `container "db"`},
		{"a mesh", strings.Replace(sgxShop, "enclave-size: 512M", "enclave-size: 512M, contrast.edgeless.systems/servicemesh-ingress: api#8443#false", 1), nil, "mesh"},
		{"another runtime class", strings.NewReplacer("runtimeClassName: cloister-cc", "runtimeClassName: gvisor", "{sgx.cloister.dev/enclave-size: 512M}", "{sgx.cloister.dev/enclave: api}").Replace(sgxShop), nil, "gvisor"},
		{"no initializer", sgxShop, func(o *Options) { o.SkipInitializer = true }, "premain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := sgxOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			// A marked pod is found by its annotation even without the
			// runtime class.
			_, _, err := Rewrite(context.Background(), []byte(tc.in), opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
	// With two containers, the annotation names the enclave's.
	out, res := rewrite(t, strings.Replace(twoContainers, "{sgx.cloister.dev/enclave-size: 512M}", "{sgx.cloister.dev/enclave: api}", 1), sgxOptions())
	var d appsv1.Deployment
	doc(t, out, 0, &d)
	if _, ok := d.Spec.Template.Spec.Containers[0].Resources.Limits[tee.SGXEPC]; ok || res.Workloads[0].Enclave.Size != 256<<20 {
		t.Errorf("the log container got EPC, or the default size is not 256M: %+v", res.Workloads[0].Enclave)
	}
}

func TestParseEnclaveSize(t *testing.T) {
	for in, want := range map[string]int64{"256M": 256 << 20, "1G": 1 << 30, "4096K": 4 << 20, "1048576": 1 << 20, "64g": 64 << 30,
		"": 0, "0": 0, "-1M": 0, "3M": 0, "512": 0, "2T": 0, "2048G": 0, "M": 0, "1.5G": 0, "9223372036854775807G": 0} {
		got, err := ParseEnclaveSize(in)
		if got != want || (err == nil) != (want != 0) {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
		if want != 0 {
			if again, _ := ParseEnclaveSize(gramineSize(got)); again != got {
				t.Errorf("%q written as %q reads %d", in, gramineSize(got), again)
			}
		}
	}
}

// The Gramine lines are TOML a Gramine manifest takes, with the
// initializer's trust written in (measured) and only the addresses
// passed through from the pod.
func TestGramineManifest(t *testing.T) {
	opts := sgxOptions()
	opts.TestRoots = "-----BEGIN CERTIFICATE-----\nMII\"x\\\n-----END CERTIFICATE-----\n"
	_, res := rewrite(t, sgxShop, opts)
	lines, err := GramineManifest(res.Workloads[0], opts)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Libos  struct{ Entrypoint string }
		Loader struct {
			Argv []string
			Env  map[string]any
		}
		SGX struct {
			RemoteAttestation string `toml:"remote_attestation"`
			EnclaveSize       string `toml:"enclave_size"`
			Debug             bool
		} `toml:"sgx"`
	}
	if _, err := toml.Decode(string(lines), &m); err != nil {
		t.Fatalf("%v\n%s", err, lines)
	}
	if m.Libos.Entrypoint != "/usr/local/bin/cloister-initializer" || strings.Join(m.Loader.Argv[1:3], " ") != "--exec --" ||
		m.SGX.RemoteAttestation != "dcap" || m.SGX.EnclaveSize != "512M" || m.SGX.Debug {
		t.Errorf("%+v", m)
	}
	for k, want := range map[string]string{initenv.EnvEvidence: initenv.EvidenceSGX, initenv.EnvExpect: opts.CASExpect, initenv.EnvPolicy: "shop",
		initenv.EnvService: "shop-deployment-api", initenv.EnvPolicyOwners: "SHA256:owner", initenv.EnvPolicyOwnerThreshold: "1", initenv.EnvInsecureTestRoots: opts.TestRoots} {
		if m.Loader.Env[k] != want {
			t.Errorf("loader.env.%s = %#v, want %q", k, m.Loader.Env[k], want)
		}
	}
	for _, k := range []string{initenv.EnvCAS, laswire.EnvNodeIP, laswire.EnvAddr} {
		if v, _ := m.Loader.Env[k].(map[string]any); v["passthrough"] != true {
			t.Errorf("loader.env.%s = %#v, want passed through", k, m.Loader.Env[k])
		}
	}
	if len(m.Loader.Env) != 10 {
		t.Errorf("loader.env has %d entries: %v", len(m.Loader.Env), m.Loader.Env)
	}
}

// generate for sgx writes each enclave's Gramine lines, and the CAS
// manifest pinning the enclave once its values are given.
func TestRunSGX(t *testing.T) {
	ws, dir := t.TempDir(), t.TempDir()
	file := filepath.Join(dir, "shop.yaml")
	pinned := strings.ReplaceAll(sgxShop, "registry.example/api:v2", "registry.example/api@"+sha('b'))
	if err := os.WriteFile(file, []byte(pinned), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := sgxOptions()
	opts.RuntimeClass = ""
	run := func(ref *refvalues.File, paths ...string) (string, error) {
		var errw bytes.Buffer
		err := Run(context.Background(), RunConfig{Platform: runtimeclass.SGX, Reference: ref, Workspace: ws, Offline: true, Paths: paths, Options: opts, Err: &errw,
			Overhead: func(context.Context, string) (int64, error) {
				t.Error("an SGX pod has no runtime class overhead")
				return 0, nil
			}})
		return errw.String(), err
	}
	out, err := run(nil, file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, ManifestFile)); err == nil || !strings.Contains(out, "no CAS manifest written") {
		t.Errorf("a manifest without the enclave's identity: %v\n%s", err, out)
	}
	lines, err := os.ReadFile(filepath.Join(ws, GramineFile("shop-deployment-api")))
	if err != nil || !strings.Contains(string(lines), `loader.env.CLOISTER_SERVICE = "shop-deployment-api"`) {
		t.Fatalf("the Gramine lines: %v\n%s", err, lines)
	}

	mr := attest.Bytes(bytes.Repeat([]byte{0xe7}, 32))
	ref := &refvalues.File{SGX: &refvalues.SGX{MRENCLAVE: mr, MRSIGNER: bytes.Repeat([]byte{0x51}, 32), ISVSVN: 2,
		Attributes: make([]byte, 16), AttributesMask: append([]byte{0x02}, make([]byte, 15)...)}}
	if out, err = run(ref, file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(ws, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policy.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ids := doc.Services[0].Attestation.Identities
	if len(doc.Services) != 1 || len(ids) != 1 || ids[0].Type != attest.SGX || !bytes.Equal(ids[0].MRENCLAVE, mr) || ids[0].MinISVSVN != 2 || doc.AllowSimulation {
		t.Errorf("manifest services %+v", doc.Services)
	}
	found, err := Inspect([]byte(pinned))
	if err == nil {
		err = CheckManifest(doc, found.Workloads)
	}
	if err == nil || !strings.Contains(err.Error(), "policy annotation") {
		t.Errorf("the YAML before generate checked against the manifest: %v", err)
	}
	rewritten, _ := os.ReadFile(file)
	if found, err = Inspect(rewritten); err != nil || CheckManifest(doc, found.Workloads) != nil {
		t.Errorf("the rewritten YAML against its manifest: %v %v", found, err)
	}

	second := filepath.Join(dir, "second.yaml")
	if err := os.WriteFile(second, []byte(strings.ReplaceAll(pinned, "api", "web")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ref, file, second); err == nil || !strings.Contains(err.Error(), "2 SGX workloads") {
		t.Errorf("one enclave's values for two workloads: %v", err)
	}
}
