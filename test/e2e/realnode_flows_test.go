//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/dev/realnode"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
	"github.com/cloister-cc/cloister/internal/las/aesm/aesmtest"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The dev cluster's real node, end to end, as root (skipped otherwise):
// Cloister's images run there, the operator's SGX plugin registers with
// the real kubelet and pods get the (fake) device, LAS is not HEALTHY
// without evidence (no simulation, no AESM) and says why, quotes an
// enclave's REPORT through a fake AESM on the node, goes
// UNHEALTHY while the device is closed to unprivileged users and HEALTHY
// when it is open again, kubectl logs and exec work, and the CAS journey of a
// resource (cas_flows_test.go): a CAS that waits for init, policies
// registered as resources, a workload that attests through its node's LAS
// at the node's address. Its cleanup checks that `dev down` leaves
// nothing on the host.
func TestRealNode(t *testing.T) {
	env := startRealNodeEnv(t)
	steps := []struct {
		name string
		run  func(*testing.T, *realNodeEnv)
	}{
		{"ImagesRunHelpAsNonRoot", testImagesRunHelp},
		{"SGXPluginRegisters", testSGXPluginRegisters},
		{"PodGetsTheDevice", testPodGetsTheDevice},
		{"EPCBoundsWhatIsScheduled", testEPCScheduling},
		{"SGXByDRA", testSGXByDRA},
		{"LASUnhealthyWhileTheDeviceIsClosed", testLASFollowsTheDevice},
		{"LogsAndExec", testLogsAndExec},
		{"CASNeedsInit", testCASNeedsInit},
		{"CASServiceFollowsTheSpec", testCASServiceFields},
		{"PoliciesRegister", testPolicies},
		{"WorkloadAttestsThroughLAS", testWorkloadAttestsThroughLAS},
		{"ConfidentialWorkloads", testConfidentialWorkloads},
		{"VaultUnsealedByCAS", testVault},
		{"PodAttestsWithItsVMsOwnEvidence", testGuestEvidence},
		{"SGXPodAttestsFromItsEnclave", testSGXPremainPod},
		{"NitroPluginFollowsTheDevice", testNitroPluginFollowsTheDevice},
		{"NitroEnclaves", testNitroEnclaves},
		{"NitroByDRA", testNitroByDRA},
		{"CEXByDRA", testCEXByDRA},
		{"OperatorKilledWhileRegistering", testOperatorKilledWhileRegistering},
		{"SimulationRefusedWithoutSpecSimulation", testSimulationRefused},
		{"CASRestartsSealedOrRecovered", testCASRecovery},
		{"CASStateWipedUnderItIsRefused", testCASStateWipedUnderIt},
		{"CASReplicasRideOutAPodKill", testCASReplicas},
		{"CASUntouchedByAnOperatorUpgrade", testCASOperatorUpgrade},
		{"CASRollsOutOneReplicaAtATime", testCASRollingUpdate},
		{"CASBackupRestoredIntoANewCAS", testCASBackupRestore},
		{"UpAgainAfterACrash", testUpAgainAfterACrash},
		{"OtherRealNodeTestsSkipWhileItRuns", testOtherSuitesSkip},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, env) }) {
			return // later steps build on earlier ones
		}
	}
}

func pullNever(name string) (string, corev1.PullPolicy) { return imageRef(name), corev1.PullNever }

// Every image runs its binary's --help as the image's non-root user
// (runAsNonRoot: the kubelet refuses an image whose user is root).
func testImagesRunHelp(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	for _, b := range image.Binaries {
		img, pull := pullNever(b)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "help-" + b, Namespace: "default"},
			Spec: onRealNode(corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "help", Image: img, ImagePullPolicy: pull, Args: []string{"--help"},
					SecurityContext: restricted()}},
			}),
		}
		if _, err := e.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range image.Binaries {
		e.waitPod(t, "default", "help-"+b, "to succeed", 2*time.Minute, func(p *corev1.Pod) bool {
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("help-%s failed: %s", b, podSummary(p))
			}
			return p.Status.Phase == corev1.PodSucceeded
		})
		out, err := kubectl(t, e.c, "logs", "-n", "default", "help-"+b)
		if err != nil || !strings.Contains(strings.ToLower(out), "usage") {
			t.Errorf("kubectl logs help-%s: %v\n%s", b, err, out)
		}
	}
}

// SGXPlugin CR -> the real plugin pod registers with the kubelet, labels
// the node, and the node's allocatable shows the resources.
func testSGXPluginRegisters(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	plugin := &basev1beta1.SGXPlugin{
		ObjectMeta: metav1.ObjectMeta{Name: "real"},
		Spec: basev1beta1.SGXPluginSpec{ServiceSpec: common.ServiceSpec{
			ImagePullPolicy: corev1.PullIfNotPresent, NodeSelector: common.NodeSelector{cluster.LabelRealNode: "true"}}},
	}
	if err := e.crs.Create(ctx, plugin); err != nil {
		t.Fatal(err)
	}
	waitState(t, e.crs, plugin, common.StateHealthy)
	waitFor(t, "the real node to offer SGX enclaves", time.Minute, func(ctx context.Context) (bool, string, error) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		q, epc := n.Status.Allocatable[sgxmode.ResourceEnclave], n.Status.Allocatable[sgxmode.ResourceEPC]
		return q.Value() > 0 && n.Labels[sgxmode.Label] == "true" && epc.Value() == realnode.FakeEPCBytes,
			"allocatable " + q.String() + " enclaves, " + epc.String() + " EPC, label " + n.Labels[sgxmode.Label], nil
	})
	waitFor(t, "the SGXPlugin status to show the node's EPC", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
			return false, err.Error(), nil
		}
		return plugin.Status.CapacityEPCBytesPerNode[cluster.RealNodeName] == realnode.FakeEPCBytes, fmt.Sprintf("%+v", plugin.Status), nil
	})
	if plugin.Status.ReadyReplicas != 1 || plugin.Status.CapacitySGXDevicesPerNode[cluster.RealNodeName] < 1 {
		t.Errorf("SGXPlugin status %+v", plugin.Status)
	}
	pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-sgx-plugin"})
	if err != nil || len(pods.Items) != 1 || !strings.Contains(pods.Items[0].Spec.Containers[0].Image, "@sha256:") {
		t.Errorf("the plugin pod does not run a digest-pinned image: %v %+v", err, pods)
	}
}

// A pod that asks for an enclave gets the device node: its own LAS probe
// (as uid 65532; simulated, so that its readiness is the device's alone)
// opens /dev/sgx_enclave, and seen from the host the container's
// /dev/sgx_enclave is the fake device, 1:3.
func testPodGetsTheDevice(t *testing.T, e *realNodeEnv) {
	img, pull := pullNever("cloister-las")
	one := resource.MustParse("1")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "enclave-user", Namespace: "default"},
		Spec: onRealNode(corev1.PodSpec{Containers: []corev1.Container{{
			Name: "enclave", Image: img, ImagePullPolicy: pull, Args: []string{"--port=18800", "--dev-root=/dev", "--probe-interval=1s", "--simulation"},
			Resources:       corev1.ResourceRequirements{Limits: corev1.ResourceList{sgxmode.ResourceEnclave: one}},
			ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(18800)}}, PeriodSeconds: 1},
			SecurityContext: restricted(),
		}}}),
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "default", "enclave-user", "to be Ready", 2*time.Minute, podReady)
	pids := liveProcessesMentioning("--port=18800")
	if len(pids) != 1 {
		t.Fatalf("processes of the enclave pod: %v", pids)
	}
	pid, _, _ := strings.Cut(pids[0], ":")
	for _, dev := range []string{"/dev/sgx_enclave", "/dev/sgx/enclave"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join("/proc", pid, "root", dev), &st); err != nil {
			t.Errorf("%s in the container: %v", dev, err)
		} else if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
			t.Errorf("%s in the container: mode %o, device %d:%d, want the fake 1:3", dev, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
}

// LAS CR -> LAS Ready on the real node; the host's device made
// unreadable -> the pod not ready, the CR UNHEALTHY with lasReplicaAlert
// (the "LAS Unhealthy" case); restored -> HEALTHY.
func testLASFollowsTheDevice(t *testing.T, e *realNodeEnv) {
	las := &basev1beta1.LAS{
		ObjectMeta: metav1.ObjectMeta{Name: "real"},
		Spec: basev1beta1.LASSpec{HostPort: 18766, ServiceSpec: common.ServiceSpec{ImagePullPolicy: corev1.PullIfNotPresent,
			NodeSelector: common.NodeSelector{sgxmode.Label: "true", cluster.LabelRealNode: "true"}}},
	}
	if err := e.crs.Create(context.Background(), las); err != nil {
		t.Fatal(err)
	}
	// Without simulation LAS quotes through the node's AESM, and the node
	// has none: not HEALTHY, and it says why, naming the node and socket.
	c := waitCondition(t, e.crs, las, health.IsHealthy, health.ReasonLASAESMUnreachable)
	if las.Status.State == common.StateHealthy || !strings.Contains(c.Message, cluster.RealNodeName) || !strings.Contains(c.Message, "aesm.socket") {
		t.Errorf("LAS without AESM: %s %s", las.Status.State, c.Message)
	}
	// A fake AESM on the node, speaking AESM's protocol: HEALTHY without
	// simulation, and an enclave's REPORT comes back from the LAS pod as
	// a quote that evidence verify accepts under the test root only.
	stopAESM := serveAESMOnNode(t, e)
	waitState(t, e.crs, las, common.StateHealthy)
	quoteThroughLAS(t, e)
	stopAESM()
	waitCondition(t, e.crs, las, health.IsHealthy, health.ReasonLASAESMUnreachable)
	if err := e.crs.Patch(context.Background(), las, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"simulation":true}}`))); err != nil {
		t.Fatal(err)
	}
	waitState(t, e.crs, las, common.StateHealthy)
	if c := healthyCondition(las.GetServiceStatus(), health.IsHealthy); las.Status.NumberAvailable != 1 || las.Status.LASReplicaAlert != 0 || !strings.Contains(c.Message, "insecure") {
		t.Fatalf("healthy LAS status %+v, %s", las.Status, c.Message)
	}
	device := filepath.Join(e.node.DevicesDir(), "sgx_enclave")
	if err := os.Chmod(device, 0); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			if err := os.Chmod(device, 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}()
	waitState(t, e.crs, las, common.StateUnhealthy)
	if las.Status.LASReplicaAlert < 1 || las.Status.NumberAvailable != 0 {
		t.Errorf("LAS status with the device closed: %+v", las.Status)
	}
	if err := os.Chmod(device, 0o666); err != nil {
		t.Fatal(err)
	}
	restored = true
	waitState(t, e.crs, las, common.StateHealthy)
}

// kubectl logs and exec reach the real kubelet through the API server.
func testLogsAndExec(t *testing.T, e *realNodeEnv) {
	pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-las"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("LAS pods: %v %v", err, pods)
	}
	name := pods.Items[0].Name
	out, err := kubectl(t, e.c, "logs", "-n", operatorNamespace, name)
	if err != nil || !strings.Contains(out, "serving local attestation") {
		t.Errorf("kubectl logs %s: %v\n%s", name, err, out)
	}
	out, err = kubectl(t, e.c, "exec", "-n", operatorNamespace, name, "--", "cloister-las", "--help")
	if err != nil || !strings.Contains(out, "-dev-root") {
		t.Errorf("kubectl exec %s -- cloister-las --help: %v\n%s", name, err, out)
	}
}

type cliError struct {
	args   []string
	err    error
	stderr string
}

func (e *cliError) Error() string {
	return "cloister " + strings.Join(e.args, " ") + ": " + e.err.Error() + ": " + strings.TrimSpace(e.stderr)
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			b.WriteString(prefix + line)
		}
	}
	return b.String()
}

// After the kubelet and containerd are killed, `dev up` (UpRealNode)
// brings the node back: Ready again, the running pods kept (their
// containers outlive containerd in their shims) and new pods start.
func testUpAgainAfterACrash(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	before, err := e.cs.CoreV1().Pods("default").Get(ctx, "enclave-user", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var killed []int
	for _, line := range liveProcessesMentioning(e.node.Dir) {
		pidStr, cmd, _ := strings.Cut(line, ": ")
		if strings.Contains(cmd, "/kubelet ") || strings.Contains(cmd, "/containerd --config") {
			pid, _ := strconv.Atoi(pidStr)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = append(killed, pid)
		}
	}
	// containerd runs under a supervisor that starts it again (as systemd
	// does); a crash of the host takes that too.
	if len(killed) != 3 {
		t.Fatalf("killed %v, want the kubelet, containerd and its supervisor", killed)
	}
	waitFor(t, "the kubelet and containerd to be gone", 10*time.Second, func(context.Context) (bool, string, error) {
		for _, line := range liveProcessesMentioning(e.node.Dir) {
			if strings.Contains(line, "/kubelet ") || strings.Contains(line, "/containerd --config") {
				return false, line, nil
			}
		}
		return true, "", nil
	})
	tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if _, err := e.c.UpRealNode(tctx, e.tools); err != nil {
		t.Fatal(err)
	}
	after := e.waitPod(t, "default", "enclave-user", "to be Ready again", 2*time.Minute, podReady)
	if after.UID != before.UID || after.Status.ContainerStatuses[0].RestartCount != before.Status.ContainerStatuses[0].RestartCount {
		t.Errorf("the pod was replaced or restarted: uid %s -> %s, restarts %d -> %d", before.UID, after.UID,
			before.Status.ContainerStatuses[0].RestartCount, after.Status.ContainerStatuses[0].RestartCount)
	}
	img, pull := pullNever("cloister-pause")
	fresh := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "after-crash", Namespace: "default"},
		Spec:       onRealNode(corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: img, ImagePullPolicy: pull, SecurityContext: restricted()}}}),
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "default", "after-crash", "to run", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
}

// With a real node up that no test of this run owns (here this test's,
// standing in for a `make demo` left running), the real-node tests of a
// second run skip, saying what holds the host and how to include them,
// instead of failing on it: run here as a second `go test` with a cache of
// its own, so it takes another lock, as a separate `make test` would.
func testOtherSuitesSkip(t *testing.T, e *realNodeEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The flags of make test, so the build cache has the test binary.
	cmd := exec.CommandContext(ctx, "go", "test", "-race", "-tags", "e2e", "-count=1", "-v", "-run", "^TestRuntimeRunsAContainer$", "./internal/dev/realnode/")
	cmd.Dir = repoRoot(t)
	// Its skip is what this test checks, not one of this run's: it goes to
	// a log of its own.
	cmd.Env = append(os.Environ(), "CLOISTER_CACHE_DIR="+t.TempDir(), testskip.EnvSkipLog+"="+filepath.Join(t.TempDir(), "skips"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the real-node tests failed while another real node runs: %v\n%s", err, out)
	}
	for _, want := range []string{"--- SKIP: TestRuntimeRunsAContainer", "a real node already holds this host", e.node.Dir, "make demo-down"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the second run's output lacks %q:\n%s", want, out)
		}
	}
	if err := realnode.HostBusy(); err == nil {
		t.Error("HostBusy says the host is free while this test's node runs")
	}
}

// signerOnNode is the quoting enclave of the fake AESM serveAESMOnNode
// runs on the real node.
var signerOnNode *producetest.SGXSigner

// serveAESMOnNode serves a fake AESM where the real node's LAS finds the
// node's (the operator's --host-aesm-dir), open to LAS's user as aesmd's
// socket is; it returns what stops it and removes the socket.
func serveAESMOnNode(t *testing.T, e *realNodeEnv) func() {
	t.Helper()
	s, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	signerOnNode = s
	dir := e.node.AESMDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "aesm.socket")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); (&aesmtest.Server{Signer: s}).Serve(ctx, lis) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			_ = os.Remove(sock)
		}
	}
	t.Cleanup(stop)
	return stop
}

// quoteThroughLAS has the real node's LAS quote an enclave's REPORT and
// checks the quote with the CLI: accepted with the test root and the
// REPORT's report data, refused without the root.
func quoteThroughLAS(t *testing.T, e *realNodeEnv) {
	t.Helper()
	lc := lasOnHost(t, e)
	ctx := context.Background()
	ti, err := lc.TargetInfo(ctx)
	if err != nil || !bytes.Equal(ti, signerOnNode.TargetInfo()) {
		t.Fatalf("target info from the node's LAS: %x %v", ti, err)
	}
	report := make([]byte, 432)
	copy(report[64:], bytes.Repeat([]byte{0xe5}, 32)) // MRENCLAVE
	copy(report[320:], []byte("an enclave's key hash"))
	ev, err := lc.QuoteReport(ctx, report)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	roots, err := signerOnNode.WriteCollateral(filepath.Join(dir, "collateral"))
	if err != nil {
		t.Fatal(err)
	}
	quote := filepath.Join(dir, "quote.bin")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(quote, ev.Raw, 0o600); err != nil {
		t.Fatal(err)
	}
	pol := fmt.Sprintf("reportData: %x\nidentities: [{type: sgx, mrenclave: %s}]\n", "an enclave's key hash", strings.Repeat("e5", 32))
	if err := os.WriteFile(policy, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"evidence", "verify", "--type", "sgx", "--evidence", quote, "--collateral", filepath.Join(dir, "collateral"), "--policy", policy}
	if out := e.mustCLI(t, append(args, "--insecure-test-roots", roots)...); !strings.Contains(out, "accepted: sgx evidence") {
		t.Errorf("evidence verify of the LAS quote:\n%s", out)
	}
	if out, err := e.cli(args...); err == nil || !strings.Contains(out, "rejected: chain") {
		t.Errorf("without the test root: %v\n%s", err, out)
	}
}
