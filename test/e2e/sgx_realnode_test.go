//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// sgxApp is the SGX premain's image: meshapp under this name, the
// application the initializer beside it becomes.
const sgxApp = "sgxapp"

// The real node's fake sysfs gives it 1.5 GiB of EPC (the SGX plugin
// publishes it): a pod whose enclave takes 1 GiB runs, a second waits,
// named unschedulable for EPC, and runs once the first is gone.
func testEPCScheduling(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	img, pull := pullNever("cloister-pause")
	create := func(name string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: onRealNode(corev1.PodSpec{Containers: []corev1.Container{{Name: "enclave", Image: img, ImagePullPolicy: pull, SecurityContext: restricted(),
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{sgxmode.ResourceEnclave: resource.MustParse("1"), sgxmode.ResourceEPC: resource.MustParse("1Gi")}}}}}),
		}
		if _, err := e.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
	create("epc-first")
	e.waitPod(t, "default", "epc-first", "to run", 2*time.Minute, running)
	create("epc-second")
	e.waitPod(t, "default", "epc-second", "to be unschedulable for EPC", time.Minute, func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "Insufficient "+sgxmode.ResourceEPC) {
				return true
			}
		}
		return false
	})
	plugin := &basev1beta1.SGXPlugin{}
	waitFor(t, "the SGXPlugin status to count the running pod's EPC", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKey{Name: "real"}, plugin); err != nil {
			return false, err.Error(), nil
		}
		return plugin.Status.UsedEPCBytesPerNode[cluster.RealNodeName] == 1<<30, fmt.Sprintf("%+v", plugin.Status), nil
	})
	deletePod(t, e, "epc-first")
	e.waitPod(t, "default", "epc-second", "to run once the EPC is free", 2*time.Minute, running)
	deletePod(t, e, "epc-second")
}

// deletePod deletes a pod of the default namespace at once and waits
// until it is gone.
func deletePod(t *testing.T, e *realNodeEnv, name string) {
	t.Helper()
	if err := e.cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+name+" to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err != nil, "still there", nil
	})
}

// gramineAppPod is a pod whose container runs a Gramine enclave.
const gramineAppPod = `apiVersion: v1
kind: Pod
metadata: {name: sgx-api, namespace: default, annotations: {sgx.cloister.dev/enclave-size: 256M}}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  containers:
  - name: api
    image: SGXAPP
`

// An SGX pod attests from inside its enclave, end to end on the real
// node: generate writes the Gramine manifest lines and, given the
// enclave's values, the CAS manifest pinning its MRENCLAVE; the pod runs
// what those lines say (the initializer, becoming the app) with the
// environment they set, its enclave simulated only at its lowest layer,
// a FUSE /dev/attestation quoting under a test PCK chain, and Gramine's
// in-enclave tmpfs an in-memory volume. CAS runs in a fake enclave of its
// own, beside the cluster: no simulation anywhere. The app starts with
// its secret as file and env; the same pod in an enclave of another
// MRENCLAVE is refused, the mismatch named, and never starts the app.
func testSGXPremainPod(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	dir := filepath.Join(e.dir, "sgx-premain")
	machine := producetest.NewSGXMachine(t, dir)
	roots := machine.Roots

	state := filepath.Join(dir, "cas-state")
	casAddr, casLog := startCASOnNode(t, cas.Config{StateDir: state, Sealer: "none", TEE: true,
		Guest: machine.EnclavePaths(t, filepath.Join(dir, "cas", "attestation"), 0xca, 0x51), CollateralDir: machine.Collateral, TestRoots: roots})
	identity := filepath.Join(dir, "cas-identity.yaml")
	values := filepath.Join(dir, "api.sgx.yaml")
	// The app enclave's values, as reference-values compute prints them
	// from its SIGSTRUCT: release mode (DEBUG clear) pinned by the mask.
	for f, text := range map[string]string{
		identity: "identities: [{type: sgx, mrenclave: '" + strings.Repeat("ca", 32) + "'}]\n",
		values: "sgx: {mrenclave: '" + strings.Repeat("e7", 32) + "', mrsigner: '" + strings.Repeat("51", 32) + "', isvProdID: 0, isvSVN: 0, " +
			"attributes: '04000000000000000300000000000000', attributesMask: '02000000000000000000000000000000'}\n",
	} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trust := []string{"--cas", "https://" + casAddr, "--cas-identity", identity, "--insecure-test-roots", roots}

	ws, resources := filepath.Join(dir, "workspace"), filepath.Join(dir, "resources")
	for _, d := range []string{ws, resources} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeDigestCache(t, e, ws)
	podFile := filepath.Join(resources, "pod.yaml")
	if err := os.WriteFile(podFile, []byte(strings.NewReplacer("NODE_LABEL", cluster.LabelRealNode, "SGXAPP", imageRef(sgxApp)).Replace(gramineAppPod)), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := []string{"generate", "--cas-identity", identity, "--insecure-test-roots", roots, "--offline", "--workspace", ws, "--policy", "sgx-e2e",
		"--cas-address", casAddr, "--initializer-image", imageRef("cloister-initializer")}
	// First the Gramine manifest's lines, with no enclave to pin yet.
	out := e.mustCLI(t, append(gen, "--reference-values", "sgx", resources)...)
	if !strings.Contains(out, "no CAS manifest written") {
		t.Errorf("generate for sgx, no values:\n%s", out)
	}
	// Then, the enclave signed, its values pin it.
	e.mustCLI(t, append(gen, "--reference-values", values, resources)...)
	addSecretEnv(t, filepath.Join(ws, generate.ManifestFile))
	out = e.mustCLI(t, append(append([]string{"set"}, trust...), "--workspace", ws, "--init-token-file", filepath.Join(state, cas.InitTokenFile), resources)...)
	if !strings.Contains(out, "manifest sgx-e2e set: version 1") || strings.Contains(out, "simulated") {
		t.Fatalf("set: %s", out)
	}
	pod := gramineRuns(t, podFile, filepath.Join(ws, generate.GramineFile("default-pod-sgx-api")))
	for i, v := range pod.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == generate.AESMDir {
			// The real node's AESM folder; the fake enclave quotes itself.
			orCreate := corev1.HostPathDirectoryOrCreate
			pod.Spec.Volumes[i].HostPath = &corev1.HostPathVolumeSource{Path: e.node.AESMDir(), Type: &orCreate}
		}
	}

	run := func(mrenclave byte) {
		t.Helper()
		enclave := filepath.Join(dir, fmt.Sprintf("enclave-%x", mrenclave), "attestation")
		machine.EnclavePaths(t, enclave, mrenclave, 0x51)
		p := pod.DeepCopy()
		isDir := corev1.HostPathDirectory
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "attestation", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: enclave, Type: &isDir}}})
		c := &p.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "attestation", MountPath: "/dev/attestation"})
		if _, err := e.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	logs := func() string {
		out, _ := kubectl(t, e.c, "logs", "-n", "default", "sgx-api")
		return out
	}
	seen := func() string {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, "sgx-api", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return podSummary(p) + "; logs:\n" + logs()
	}

	run(0xe7)
	digests := regexp.MustCompile(`file /cloister/tls-config/files/workload-secret: 64 bytes, sha256 ([0-9a-f]{64})\nenv API_TOKEN: 64 bytes, sha256 ([0-9a-f]{64})`)
	waitFor(t, "the app to start in the enclave with its secret", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		return digests.MatchString(logs()), seen(), nil
	})
	got := logs()
	if m := digests.FindStringSubmatch(got); m[1] != m[2] {
		t.Errorf("the app's secret file and env differ:\n%s", got)
	}
	if !strings.Contains(got, `"msg":"attested"`) || !strings.Contains(got, "starting the application in this enclave") || strings.Contains(got, "simulated") {
		t.Errorf("the premain:\n%s", got)
	}
	if !strings.Contains(casLog.String(), "INSECURE: workload evidence that chains to a test root") {
		t.Errorf("CAS took test-root evidence without saying so:\n%s", casLog)
	}
	deletePod(t, e, "sgx-api")

	run(0xe8)
	waitFor(t, "the initializer to say CAS refused the other enclave", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		out := logs()
		return strings.Contains(out, "not attested yet") && strings.Contains(out, "MRENCLAVE is "+strings.Repeat("e8", 32)), seen(), nil
	})
	if out := logs(); strings.Contains(out, "starting the application") || strings.Contains(out, "sha256") {
		t.Errorf("the other enclave ran the app:\n%s", out)
	}
	deletePod(t, e, "sgx-api")
}

// addSecretEnv gives the manifest's (one) service its secret as the
// environment variable API_TOKEN too, as an owner would before set.
func addSecretEnv(t *testing.T, file string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policy.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	svc := &doc.Services[0]
	svc.Env = map[string]string{"API_TOKEN": generate.WorkloadSecretTemplate}
	if err := generate.WriteManifest(file, doc); err != nil {
		t.Fatal(err)
	}
}

// gramineRuns is the generated pod as Gramine would run it: its enclave
// container runs the manifest lines' entrypoint and arguments, the
// application meshapp showing its secret, with the environment the lines
// set and what they pass through from the pod; the initializer's folder
// is in memory, as the lines' tmpfs is in the enclave.
func gramineRuns(t *testing.T, podFile, gramineFile string) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(podFile)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := sigsyaml.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Libos  struct{ Entrypoint string }
		Loader struct {
			Argv []string
			Env  map[string]any
		}
	}
	if _, err := toml.DecodeFile(gramineFile, &m); err != nil {
		t.Fatal(err)
	}
	c := &pod.Spec.Containers[0]
	if pod.Spec.RuntimeClassName != nil || len(pod.Spec.InitContainers) > 0 || c.Resources.Limits.Name(sgxmode.ResourceEPC, resource.BinarySI).Value() != 256<<20 {
		t.Fatalf("generate made the SGX pod %+v", pod.Spec)
	}
	i := slices.Index(m.Loader.Argv, "APPLICATION")
	if m.Libos.Entrypoint != m.Loader.Argv[0] || i < 0 {
		t.Fatalf("the Gramine lines run %s %v", m.Libos.Entrypoint, m.Loader.Argv)
	}
	c.Command = slices.Concat(m.Loader.Argv[:i], []string{path.Join(image.BinDir, sgxApp), "secret", "--file", initenv.DefaultOut + "/files" + generate.WorkloadSecretFile, "--env", "API_TOKEN"})
	for name, v := range m.Loader.Env {
		if s, ok := v.(string); ok {
			c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: s})
		}
	}
	c.SecurityContext = restricted()
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "enclave-tmpfs", MountPath: initenv.SecretsPath})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "enclave-tmpfs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}})
	return &pod
}
