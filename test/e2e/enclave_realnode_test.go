//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// enclaveApp is the enclave test's user plugin (test/e2e/enclaveapp),
// whose image also holds cloister-enclave: a simulated enclave runs its
// plugins from the pod's image.
const enclaveApp = "enclaveapp"

// A simulated NitroEnclaveDeployment on the real node (the real node made
// a Nitro host: its label and four enclave devices): the enclave pod
// really runs the supervisor, which boots the orchestrator as a child
// process and syncs the manifest; READY 1/1 once the plugin runs, with the
// orchestrator's and the supervisor's logs on the pod's; Nitro-shaped
// simulated evidence with the manifest's PCRs, accepted only with
// --allow-simulation; a configuration change reaches the running enclave
// without a new pod; Always restarts an exiting plugin inside the enclave;
// Never leaves it failed, the pod unready, READY 0/1 and an event naming
// the plugin.
func testNitroEnclaves(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	node := cluster.RealNodeName
	// The NitroPlugin of the step before labels the node and offers its
	// enclaves (from the fake /dev/nitro_enclaves).
	n, err := e.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if q := n.Status.Allocatable[tee.NitroEnclaves]; err != nil || n.Labels[tee.LabelNitro] != "true" || q.Value() < 1 {
		t.Fatalf("the real node is no Nitro node: %v, label %q, %s enclaves", err, n.Labels[tee.LabelNitro], q.String())
	}

	// A pod outside the enclave, which the plugin reaches through its
	// egress.
	otherImg, pull := pullNever(enclaveApp)
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "enclave-egress-target", Namespace: "default"},
		Spec: onRealNode(corev1.PodSpec{Containers: []corev1.Container{{Name: "answer", Image: otherImg, ImagePullPolicy: pull,
			Command:         []string{image.BinDir + "/" + enclaveApp, "answer", "--listen", ":9090", "--text", "the other pod says hi"},
			SecurityContext: restricted()}}})}
	if _, err := e.cs.CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Pods("default").Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	other = e.waitPod(t, "default", other.Name, "to run", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" })

	ned := &enclavev1beta1.NitroEnclaveDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "enc"},
		Spec: enclavev1beta1.NitroEnclaveDeploymentSpec{
			ServiceSpec: common.ServiceSpec{Image: imageRef(enclaveApp), ImagePullPolicy: corev1.PullNever,
				NodeSelector: common.NodeSelector{cluster.LabelRealNode: "true"}},
			Simulation: true,
			Enclave:    enclavev1beta1.EnclaveResources{MemoryMiB: 256},
			UserPlugins: []enclavev1beta1.UserPlugin{{
				Name: "api", Image: "registry.example/api:1",
				// Loopback only: in simulation the pod's address is the
				// supervisor's, which relays into the enclave.
				Command: []string{image.BinDir + "/" + enclaveApp, "serve", "--listen", "127.0.0.1:8080", "--egress", "127.0.0.1:9191"},
				Env:     []corev1.EnvVar{{Name: "MODE", Value: "one"}}, RestartPolicy: corev1.RestartPolicyAlways,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
			Egress: []enclavev1beta1.EnclaveEgress{{Name: "other", Port: 9191, Address: net.JoinHostPort(other.Status.PodIP, "9090")}},
		},
	}
	applied := time.Now()
	if err := e.crs.Create(ctx, ned); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.crs.Delete(context.Background(), ned) })
	nedIs(t, e.crs, ned, enclavev1beta1.DeploymentScheduled, "", time.Minute)
	scheduled := time.Since(applied)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := kubectl(t, e.c, "logs", "-n", "default", "-l", "app.kubernetes.io/instance=ned-enc", "--tail=40")
			desc, _ := kubectl(t, e.c, "describe", "pods", "-n", "default", "-l", "app.kubernetes.io/instance=ned-enc")
			t.Logf("enclave pod's log:\n%s\n%s", out, lastLines(desc, 30))
		}
	})
	nedIs(t, e.crs, ned, enclavev1beta1.DeploymentScheduled, "1/1", 3*time.Minute)
	t.Logf("real node, sim backend: apply -> SCHEDULED in %s, -> READY 1/1 in %s", scheduled.Round(time.Millisecond), time.Since(applied).Round(time.Millisecond))
	pods := nedPods(t, e.crs, ned)
	if len(pods) != 1 || pods[0].Spec.NodeName != node {
		t.Fatalf("enclave pods %v, want one on %s", pods, node)
	}
	pod := pods[0]
	// A client reaches the plugin's port at the pod's address: the
	// supervisor relays it into the enclave over the channel (unix
	// sockets standing in for vsock), and the plugin's own connection to
	// its egress port comes out through the pod to the other pod.
	reply := func() string {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(pod.Status.PodIP, "8080"), 5*time.Second)
		if err != nil {
			return err.Error()
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		return strings.TrimSpace(string(b))
	}
	if got := reply(); got != "mode one; egress: the other pod says hi" {
		t.Errorf("through the enclave's port and egress: %q", got)
	}
	logs := func() string {
		out, _ := kubectl(t, e.c, "logs", "-n", "default", pod.Name, "-c", "enclave")
		return out
	}
	waitLogs := func(what string, ok func(string) bool) {
		t.Helper()
		waitFor(t, what, 3*time.Minute, func(context.Context) (bool, string, error) {
			l := logs()
			return ok(l), lastLines(l, 8), nil
		})
	}
	waitLogs("the pod's log to show the orchestrator, the plugin and the health checks", func(l string) bool {
		return strings.Contains(l, "enclaveapp serving in mode one") && strings.Contains(l, `"component":"enclave-orchestrator"`) &&
			strings.Contains(l, `"msg":"health check: enclave healthy"`)
	})

	// Evidence from the enclave: Nitro-shaped, the manifest's PCRs, the
	// nonce, the applied manifest's digest as user data; simulated and so
	// refused unless allowed.
	evidence := func(name string) string {
		t.Helper()
		cmd := exec.Command(tools(t).Path("kubectl"), "--kubeconfig", e.c.KubeconfigPath(), "exec", "-n", "default", pod.Name, "-c", "enclave", "--",
			image.BinDir+"/cloister-enclave", "evidence", "--nonce", "c0ffee")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		raw, err := cmd.Output()
		if err != nil {
			t.Fatalf("cloister-enclave evidence: %v\n%s", err, stderr.String())
		}
		file := filepath.Join(e.dir, name)
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	evidenceFile := evidence("enclave-evidence")
	if out, err := e.cli("evidence", "verify", "--type", "sim", "--evidence", evidenceFile); err == nil || !strings.Contains(out, "rejected") {
		t.Errorf("simulated enclave evidence without --allow-simulation: %v\n%s", err, out)
	}
	var verdict struct{ Claims attest.Claims }
	if err := json.Unmarshal([]byte(e.mustCLI(t, "evidence", "verify", "--type", "sim", "--evidence", evidenceFile, "--allow-simulation", "--nonce", "c0ffee", "-o", "json")), &verdict); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.FromSpec(&ned.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.crs.Get(ctx, client.ObjectKeyFromObject(ned), ned); err != nil {
		t.Fatal(err)
	}
	if c := verdict.Claims; !c.Insecure || c.Nitro == nil || c.Nonce.String() != "c0ffee" || c.ReportData.String() != m.ManifestDigest() ||
		ned.Status.Manifest != m.ManifestDigest() ||
		!bytes.Equal(c.Nitro.PCRs[manifest.PCRImage], m.SimPCRs()[manifest.PCRImage]) || !bytes.Equal(c.Nitro.PCRs[manifest.PCRApplication], m.SimPCRs()[manifest.PCRApplication]) {
		t.Errorf("claims %+v, status.manifest %q: want the manifest's PCRs and digest %s", c, ned.Status.Manifest, m.ManifestDigest())
	}
	// The status shows the PCRs the evidence carries: what a verifier pins.
	if p := ned.Status.PCRs; p == nil || p.PCR0 != fmt.Sprintf("%x", c0(verdict.Claims)) || p.PCR2 != fmt.Sprintf("%x", m.SimPCRs()[manifest.PCRApplication]) {
		t.Errorf("status.pcrs %+v, the evidence's PCR0 %x", p, c0(verdict.Claims))
	}
	// A verifier pins the manifest and the PCR0 the status shows.
	pin := func(name, digest string) string {
		t.Helper()
		file := filepath.Join(e.dir, name)
		doc := fmt.Sprintf("allowSimulation: true\nidentities:\n- type: nitro\n  pcrs: {0: \"%s\"}\n  manifest: \"%s\"\n", ned.Status.PCRs.PCR0, digest)
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	original := pin("pin-original.yaml", ned.Status.Manifest)
	e.mustCLI(t, "evidence", "verify", "--type", "sim", "--evidence", evidenceFile, "--policy", original, "--nonce", "c0ffee")

	// change writes the NED's spec as change leaves it. The operator
	// writes the NED too (its finalizer, status): a write of a stale copy
	// is tried again on the newest.
	change := func(change func()) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := e.crs.Get(ctx, client.ObjectKeyFromObject(ned), ned); err != nil {
				return err
			}
			change()
			return e.crs.Update(ctx, ned)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	edit := func(f func(*enclavev1beta1.UserPlugin)) { t.Helper(); change(func() { f(&ned.Spec.UserPlugins[0]) }) }
	samePod := func() {
		t.Helper()
		now := nedPods(t, e.crs, ned)
		if len(now) != 1 || now[0].UID != pod.UID {
			t.Fatalf("the enclave pod was replaced: %v", now)
		}
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("the enclave pod's container restarted: %v %v", err, p.Status.ContainerStatuses)
		}
	}

	// Configuration only: into the running enclave, no new pod.
	changed := time.Now()
	edit(func(p *enclavev1beta1.UserPlugin) { p.Env[0].Value = "two" })
	waitLogs("the plugin to run with MODE=two", func(l string) bool {
		return strings.Contains(l, "enclaveapp serving in mode two") && strings.Contains(l, `"msg":"manifest applied in place"`)
	})
	t.Logf("a configuration change reached the running enclave in %s", time.Since(changed).Round(time.Millisecond))
	samePod()
	// The host changed what the enclave runs: the evidence shows it, and
	// the verifier pinning the original manifest refuses it.
	changedFile := evidence("enclave-evidence-changed")
	if out, err := e.cli("evidence", "verify", "--type", "sim", "--evidence", changedFile, "--policy", original, "--nonce", "c0ffee"); err == nil ||
		!strings.Contains(out, "rejected: identity") || !strings.Contains(out, "the host changed what the enclave runs") {
		t.Errorf("evidence after an in-place change, verified against the original manifest: %v\n%s", err, out)
	}
	waitFor(t, "status.manifest to show the changed manifest", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := e.crs.Get(ctx, client.ObjectKeyFromObject(ned), ned)
		return err == nil && ned.Status.Manifest != "" && ned.Status.Manifest != m.ManifestDigest(), ned.Status.Manifest, nil
	})
	// Nor does pinning the new manifest accept it: the enclave ran the
	// original first (PCR16), the change after it (PCR17); only a freshly
	// started enclave that ran the pinned manifest alone is accepted.
	if out, err := e.cli("evidence", "verify", "--type", "sim", "--evidence", changedFile, "--policy", pin("pin-changed.yaml", ned.Status.Manifest), "--nonce", "c0ffee"); err == nil ||
		!strings.Contains(out, "PCR16 (the first manifest the enclave applied)") {
		t.Errorf("evidence after an in-place change, verified against the changed manifest: %v\n%s", err, out)
	}

	// Always: the orchestrator restarts the plugin each time it exits.
	edit(func(p *enclavev1beta1.UserPlugin) {
		p.Command = []string{image.BinDir + "/" + enclaveApp, "exit", "--after", "1s", "--code", "3"}
	})
	waitLogs("the orchestrator to restart the exiting plugin twice", func(l string) bool {
		n := 0
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, `"msg":"plugin ended; restarting"`) && strings.Contains(line, `"plugin":"api"`) && strings.Contains(line, "exited with code 3") {
				n++
			}
		}
		return n >= 2
	})
	samePod()

	// A change the API server refuses (a pod annotation with an invalid
	// key) is rolled back, not uninstalled: the enclave pod keeps running,
	// and the NED says why; a corrected spec is rolled out again.
	setAnnotations := func(a map[string]string) { t.Helper(); change(func() { ned.Spec.PodAnnotations = a }) }
	setAnnotations(map[string]string{"not a valid key!": "x"})
	waitCondition(t, e.crs, ned, health.ReleaseRolledBack, health.ReasonReleaseRolledBack)
	samePod()
	setAnnotations(nil)
	waitCondition(t, e.crs, ned, health.ReleaseRolledBack, health.ReasonReleaseNotRolledBack)
	samePod()

	// Never: failed for good; the pod leaves the ready ones; the NED says
	// which plugin.
	edit(func(p *enclavev1beta1.UserPlugin) { p.RestartPolicy = corev1.RestartPolicyNever })
	nedIs(t, e.crs, ned, enclavev1beta1.DeploymentScheduled, "0/1", 3*time.Minute)
	const says = "plugin api failed: exited with code 3"
	waitFor(t, "an event naming the failed plugin", 2*time.Minute, func(context.Context) (bool, string, error) {
		out, err := kubectl(t, e.c, "describe", "ned", "enc", "-n", "default")
		return err == nil && strings.Contains(out, "EnclaveUnhealthy") && strings.Contains(out, says), lastLines(out, 12), nil
	})
	if ned.Status.State != common.StateUnhealthy {
		waitState(t, e.crs, ned, common.StateUnhealthy)
	}
	samePod()

	if err := e.crs.Delete(ctx, ned); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the enclave pod to go", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil, fmt.Sprint(err), nil
	})
	if left := liveProcessesMentioning("cloister-enclave\x00orchestrator"); len(left) > 0 {
		t.Errorf("plugin processes outlive their pod: %v", left)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// c0 is the PCR0 of Nitro claims, nil without them.
func c0(c attest.Claims) []byte {
	if c.Nitro == nil {
		return nil
	}
	return c.Nitro.PCRs[manifest.PCRImage]
}
