//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/realnode"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// snpPod is a pod marked confidential, for the snp platform.
const snpPod = `apiVersion: v1
kind: Pod
metadata: {name: snp-web, namespace: default}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  containers:
  - name: web
    image: PAUSE
    resources: {limits: {memory: 32Mi}}
`

// A pod in a fake SEV-SNP confidential VM attests with its VM's own
// evidence, end to end on the real node: the VM is simulated only at its
// lowest layer, a configfs-tsm-shaped folder this test answers as the
// kernel would (reports signed with go-sev-guest's test keys, the host data
// the pod's policy digest, as Kata sets it from the initdata), mounted
// where the pod's initializer looks for configfs-tsm. Kata cannot run here,
// so the pod runs under the sim runtime (runc). CAS runs in a fake VM of
// its own, beside the cluster, vouching for its TLS key with that VM's
// evidence and trusting the test roots by its one insecure flag: no
// simulation anywhere. generate, set, the initializer and CAS are the real
// code; the same pod with a tampered report is refused by name.
func testGuestEvidence(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	dir := filepath.Join(e.dir, "guest-evidence")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Measurement[0], s.Measurement[47] = 0x5E, 0x7E
	roots := filepath.Join(dir, "test-roots.pem")
	if err := os.WriteFile(roots, s.RootsPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	vm := func(name string, hostData []byte, tamper func([]byte)) string {
		return s.ServeVM(t, filepath.Join(dir, name), hostData, tamper)
	}
	// CAS's own pod policy's digest, which its identity pins beside the
	// measurement every pod of the runtime class shares.
	casHostData := bytes.Repeat([]byte{0xCA}, 32)

	// CAS in its fake VM, on the node's address, where the pods reach it.
	state := filepath.Join(dir, "cas-state")
	casAddr, casLog := startCASOnNode(t, cas.Config{StateDir: state, Sealer: "none",
		TEE: true, Guest: producetest.GuestPaths(vm("cas-vm", casHostData, nil)), TestRoots: roots})
	measurement := hex.EncodeToString(s.Measurement[:])
	identity := filepath.Join(dir, "cas-identity.yaml")
	reference := filepath.Join(dir, "reference.yaml")
	for f, text := range map[string]string{identity: "identities: [{type: snp, measurement: '" + measurement + "', hostData: '" + hex.EncodeToString(casHostData) + "'}]\n", reference: "snp: {measurement: '" + measurement + "'}\n"} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trust := []string{"--cas", "https://" + casAddr, "--cas-identity", identity, "--insecure-test-roots", roots}

	// generate for snp, with the images pinned from the node's store.
	ws, resources := filepath.Join(dir, "workspace"), filepath.Join(dir, "resources")
	for _, d := range []string{ws, resources} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeDigestCache(t, e, ws)
	podFile := filepath.Join(resources, "pod.yaml")
	if err := os.WriteFile(podFile, []byte(strings.NewReplacer("NODE_LABEL", cluster.LabelRealNode, "PAUSE", imageRef("cloister-pause")).Replace(snpPod)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.mustCLI(t, "generate", "--reference-values", "snp", "--reference-values-file", reference, "--cas-identity", identity, "--insecure-test-roots", roots,
		"--offline", "--workspace", ws, "--policy", "snp-e2e", "--cas-address", casAddr, "--initializer-image", imageRef("cloister-initializer"), resources)
	if !strings.Contains(out, "INSECURE") {
		t.Errorf("generate with test roots did not say INSECURE:\n%s", out)
	}
	out = e.mustCLI(t, append(append([]string{"set"}, trust...), "--workspace", ws, "--init-token-file", filepath.Join(state, cas.InitTokenFile), resources)...)
	if !strings.Contains(out, "manifest snp-e2e set: version 1") || strings.Contains(out, "simulated") {
		t.Fatalf("set: %s", out)
	}
	hostData := manifestHostData(t, filepath.Join(ws, generate.ManifestFile))

	// The pod as its (fake) VM would run it: the VM's configfs-tsm is the
	// folder; runc, not Kata, so the initializer needs no privilege to
	// reach it (privileged under runc would be the host's).
	runtimeClass := installSimRuntime(t, e)
	defer removeSimRuntime(t, e, runtimeClass)
	run := func(tsm string) {
		t.Helper()
		raw, err := os.ReadFile(podFile)
		if err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		if err := sigsyaml.Unmarshal(raw, &pod); err != nil {
			t.Fatal(err)
		}
		pod.Spec.RuntimeClassName = &runtimeClass
		ic := &pod.Spec.InitContainers[0]
		if ic.Name != generate.InitializerName || ic.SecurityContext == nil || ic.SecurityContext.Privileged == nil || !*ic.SecurityContext.Privileged {
			t.Fatalf("generate for snp made the initializer %+v", ic)
		}
		ic.SecurityContext = restricted()
		ic.Env = append(ic.Env, corev1.EnvVar{Name: initenv.EnvTSM, Value: "/run/tsm"})
		ic.VolumeMounts = append(ic.VolumeMounts, corev1.VolumeMount{Name: "tsm", MountPath: "/run/tsm"})
		dirType := corev1.HostPathDirectory
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "tsm", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: tsm, Type: &dirType}}})
		if _, err := e.cs.CoreV1().Pods("default").Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	remove := func() {
		t.Helper()
		if err := e.cs.CoreV1().Pods("default").Delete(ctx, "snp-web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod snp-web to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
			_, err := e.cs.CoreV1().Pods("default").Get(ctx, "snp-web", metav1.GetOptions{})
			return err != nil, "still there", nil
		})
	}

	run(vm("pod-vm", hostData, nil))
	waitFor(t, "pod snp-web to run with its certificate", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, "snp-web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		logs, _ := kubectl(t, e.c, "logs", "-n", "default", "snp-web", "-c", generate.InitializerName)
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + "; the initializer says:\n" + logs, nil
	})
	logs, _ := kubectl(t, e.c, "logs", "-n", "default", "snp-web", "-c", generate.InitializerName)
	if !strings.Contains(logs, "own evidence") || !strings.Contains(logs, `"msg":"attested"`) || strings.Contains(logs, "simulated") {
		t.Errorf("initializer:\n%s", logs)
	}
	if !strings.Contains(casLog.String(), "INSECURE: workload evidence that chains to a test root") {
		t.Errorf("CAS took test-root evidence without saying so:\n%s", casLog)
	}
	remove()

	// A report changed after signing (here its host data) is refused by
	// CAS, naming the check, and the pod stays in its initializer.
	run(vm("tampered-vm", hostData, func(r []byte) { r[0xC0] ^= 0xFF }))
	waitFor(t, "the initializer to say CAS refused the tampered report", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		out, _ := kubectl(t, e.c, "logs", "-n", "default", "snp-web", "-c", generate.InitializerName)
		return strings.Contains(out, "not attested yet") && strings.Contains(out, "signature"), out, nil
	})
	p, err := e.cs.CoreV1().Pods("default").Get(ctx, "snp-web", metav1.GetOptions{})
	if err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("the pod with a tampered report: %v %v", p.Status.Phase, err)
	}
	remove()
}

// manifestHostData is the host data generate's manifest expects of the
// (one) snp service: the pod's policy digest.
func manifestHostData(t *testing.T, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Services []struct {
			Attestation struct {
				Identities []struct {
					HostData string `json:"hostData"`
				} `json:"identities"`
			} `json:"attestation"`
		} `json:"services"`
	}
	if err := sigsyaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Services) != 1 || len(m.Services[0].Attestation.Identities) != 1 {
		t.Fatalf("manifest services %+v", m.Services)
	}
	d, err := hex.DecodeString(m.Services[0].Attestation.Identities[0].HostData)
	if err != nil || len(d) != 32 {
		t.Fatalf("host data %q: %v", m.Services[0].Attestation.Identities[0].HostData, err)
	}
	return d
}

// startCASOnNode runs CAS beside the cluster, on the real node's address
// where its pods reach it, until the test ends; it returns CAS's address
// and its log.
func startCASOnNode(t *testing.T, cfg cas.Config) (string, *testenv.Buffer) {
	t.Helper()
	node := realnode.DefaultNetwork.NodeIP().String()
	cfg.Listen, cfg.TLSSANs = net.JoinHostPort(node, "0"), []string{node}
	addr := make(chan string, 1)
	cfg.Ready = func(a string) { addr <- a }
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := &testenv.Buffer{}
	go func() { done <- cas.Run(ctx, cfg, slog.New(slog.NewJSONHandler(log, nil))) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("CAS: %v", err)
		}
	})
	select {
	case a := <-addr:
		return a, log
	case err := <-done:
		t.Fatalf("CAS did not start: %v", err)
	}
	return "", nil
}
