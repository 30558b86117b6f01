//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/hack/images/shipped"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/dev/realnode"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
	"github.com/cloister-cc/cloister/internal/operator"
)

// imageVersion tags the images the real-node tests build and import.
const imageVersion = "e2e"

// realNodeEnv is a dev cluster with one simulated and one real node,
// Cloister's images imported there and the operator pointed at them.
type realNodeEnv struct {
	c     *cluster.Cluster
	node  *realnode.Node
	cs    kubernetes.Interface
	crs   client.WithWatch
	bin   string                // the binaries the images hold
	built []image.Built         // their images, imported on the node
	tools cluster.RealNodeTools // what the node runs
	op    *operatorProcess      // the operator beside the cluster
	dir   string                // files the steps share
}

// imageRef is the name of one of the imported images.
func imageRef(name string) string { return image.Ref(image.DefaultRegistry, name, imageVersion) }

// buildImages builds every binary statically, as make build does, and its
// image, as make images does.
func buildImages(t testing.TB) (bin string, built []image.Built) {
	t.Helper()
	bin, out := t.TempDir(), t.TempDir()
	cmd := exec.Command("go", append(append([]string{"build"}, toolchain.BuildFlags...), "-ldflags",
		"-X github.com/cloister-cc/cloister/internal/base/version.Version="+imageVersion, "-o", bin+"/", "./cmd/...", "./test/e2e/"+meshApp, "./test/e2e/"+enclaveApp)...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), toolchain.BuildEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}
	built, err := image.BuildAll(bin, out, image.DefaultRegistry, imageVersion, version.Get().Commit, "e2e", shipped.Files)
	if err != nil {
		t.Fatal(err)
	}
	// The mesh test's app, beside Cloister's images.
	app, err := image.BuildTo(image.Spec{Name: meshApp, Binary: filepath.Join(bin, meshApp), Version: imageVersion}, out, image.DefaultRegistry)
	if err != nil {
		t.Fatal(err)
	}
	// The enclave test's image: its user plugin beside cloister-enclave.
	enc, err := image.BuildTo(image.Spec{Name: enclaveApp, Binary: filepath.Join(bin, enclaveApp), Extra: []string{filepath.Join(bin, "cloister-enclave")},
		Version: imageVersion}, out, image.DefaultRegistry)
	if err != nil {
		t.Fatal(err)
	}
	// The SGX premain's image: the app (meshapp, as sgxapp), and the
	// initializer that becomes it.
	sgx, err := image.BuildTo(image.Spec{Name: sgxApp, Binary: filepath.Join(bin, meshApp), Extra: []string{filepath.Join(bin, "cloister-initializer")},
		Version: imageVersion}, out, image.DefaultRegistry)
	if err != nil {
		t.Fatal(err)
	}
	return bin, append(built, app, enc, sgx)
}

// tarballs are the files of built images.
func tarballs(built []image.Built) []string {
	files := make([]string, len(built))
	for i, b := range built {
		files[i] = b.File
	}
	return files
}

// pinned is the digest-pinned reference of the named image.
func pinned(t testing.TB, built []image.Built, name string) string {
	for _, b := range built {
		if b.Name == name {
			return b.Pinned()
		}
	}
	t.Fatalf("no image %s", name)
	return ""
}

// hostState is what the real node may change on the host.
type hostState struct {
	missing []string // fixed paths and cgroups that do not exist
	bridge  bool
	// hostPorts: the portmap plugin's nftables table exists.
	hostPorts bool
}

func readHostState() hostState {
	var s hostState
	paths := slices.Concat(realnode.KubeletPaths, realnode.RuntimePaths,
		realnode.CgroupTrees("kubepods"), realnode.CgroupTrees(realnode.Namespace))
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			s.missing = append(s.missing, p)
		}
	}
	_, err := net.InterfaceByName(realnode.DefaultNetwork.Bridge)
	s.bridge = err == nil
	s.hostPorts = exec.Command("nft", "list", "table", "ip", "cni_hostport").Run() == nil
	return s
}

// liveProcessesMentioning lists processes (not zombies) with s in their
// command line.
func liveProcessesMentioning(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), s) || e.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

// prepareRealNode skips unless a real node can run here (root, runc),
// builds what it runs (kubelet, containerd, Cloister's images) and takes
// the host's real-node lock until tb ends.
func prepareRealNode(tb testing.TB) (nodeTools cluster.RealNodeTools, bin string, built []image.Built) {
	tb.Helper()
	if os.Geteuid() != 0 {
		testskip.Skipf(tb, "the real node needs root: containerd, runc, mounts and a network bridge")
	}
	if err := realnode.HostTools(); err != nil {
		testskip.Skipf(tb, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tc := tools(tb)
	// Other packages' real-node tests hold the lock while their node is
	// up; a node up while we hold it is someone else's, a demo's.
	unlock, err := toolchain.Lock(filepath.Join(tc.CacheRoot, realnode.LockFile))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(unlock)
	if err := realnode.HostBusy(); err != nil {
		testskip.Skipf(tb, "%v", realnode.SkipBusy(err))
	}
	kubelet, runtime := tc.Node()
	for _, chain := range []*toolchain.Toolchain{kubelet, runtime} {
		if err := chain.Ensure(ctx, os.Stderr); err != nil {
			tb.Fatal(err)
		}
	}
	bin, built = buildImages(tb)
	return cluster.RealNodeTools{Kubelet: kubelet.Path(toolchain.Kubelet.Name), RuntimeDir: runtime.BinDir, Images: tarballs(built)}, bin, built
}

// startRealNodeEnv brings the environment up, with the CRDs and the
// operator beside the cluster, and registers its removal, which must leave
// nothing behind on the host.
func startRealNodeEnv(t testing.TB) *realNodeEnv {
	t.Helper()
	env := upRealNodeCluster(t)
	installCRDs(t, env.c, env.cs)
	op := newOperator(t, env.c)
	// The operator of the images' build: the runtime class it installs
	// is named for that version, as generate of the same build names it.
	op.bin = filepath.Join(env.bin, "cloister-operator")
	op.args = []string{
		// Pinned by digest, as manifests should be: the node has the images
		// under that name too.
		"--device-plugin-image=" + pinned(t, env.built, "cloister-device-plugin"), "--las-image=" + pinned(t, env.built, "cloister-las"), "--cas-image=" + pinned(t, env.built, "cloister-cas"),
		"--node-installer-image=" + pinned(t, env.built, "cloister-node-installer"), "--enclave-image=" + pinned(t, env.built, "cloister-enclave"),
		"--initializer-image=" + pinned(t, env.built, "cloister-initializer"),
		"--host-dev-dir=" + env.node.DevicesDir(), "--host-kubelet-dir=" + env.node.KubeletRootDir(), "--host-aesm-dir=" + env.node.AESMDir(), "--host-sys-dir=" + env.node.SysDir(), "--host-cdi-dir=" + env.node.CDIDir(),
	}
	op.start(t)
	t.Cleanup(func() { op.stop(t) })
	env.op = op
	env.dir = t.TempDir()
	return env
}

// upRealNodeCluster brings up a dev cluster with one simulated and the
// real node, Cloister's images imported there, and nothing installed.
func upRealNodeCluster(t testing.TB) *realNodeEnv {
	t.Helper()
	nodeTools, bin, built := prepareRealNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := readHostState()
	if before.bridge {
		t.Fatalf("bridge %s exists already: is another real node running?", realnode.DefaultNetwork.Bridge)
	}
	c := newCluster(t, "real")
	env := &realNodeEnv{c: c, bin: bin, built: built, tools: nodeTools}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if _, err := c.Down(dctx); err != nil {
			t.Errorf("dev down: %v", err)
		}
		if env.node == nil {
			return
		}
		if left := liveProcessesMentioning(env.node.Dir); len(left) > 0 {
			t.Errorf("processes left:\n%s", strings.Join(left, "\n"))
		}
		if mounts, _ := realnode.MountsUnder(env.node.Dir); len(mounts) > 0 {
			t.Errorf("mounts left: %v", mounts)
		}
		after := readHostState()
		if after.bridge {
			t.Errorf("bridge %s left", realnode.DefaultNetwork.Bridge)
		}
		if after.hostPorts && !before.hostPorts {
			t.Error("the hostPort rules' nftables table (ip cni_hostport) left")
		}
		// A table that was there before stays, but not the node's rules.
		if rules, err := realnode.HostPortRulesInto(realnode.DefaultNetwork.PodCIDR()); err != nil || len(rules) > 0 {
			t.Errorf("hostPort rules into the node's pods left: %v %v", err, rules)
		}
		if left := slices.DeleteFunc(slices.Clone(before.missing), func(p string) bool { return slices.Contains(after.missing, p) }); len(left) > 0 {
			t.Errorf("paths made outside the node's folder and left: %v", left)
		}
		if _, err := os.Stat(env.node.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the node's folder %s is left: %v", env.node.Dir, err)
		}
		if err := os.RemoveAll(c.Workdir); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := c.Up(ctx, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	node, err := c.UpRealNode(ctx, nodeTools)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("real node %s Ready in %s (%s, %s)", node.Name, time.Since(start).Round(time.Millisecond),
		node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion)
	if env.node, err = c.RealNode(nodeTools); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if env.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if env.crs, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return env
}

// waitPod waits until the pod satisfies cond, saying what it saw.
func (e *realNodeEnv) waitPod(t testing.TB, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, fmt.Sprintf("pod %s/%s %s", ns, name, what), timeout, func(ctx context.Context) (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pod = p
		return cond(p), podSummary(p), nil
	})
	return pod
}

func podSummary(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	for _, c := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf("; %s terminated: %s (exit %d) %s", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message)
		default:
			s += fmt.Sprintf("; %s running, ready %v", c.Name, c.Ready)
		}
		if last := c.LastTerminationState.Terminated; c.RestartCount > 0 && last != nil {
			s += fmt.Sprintf(" (restarted %d times, last %s, exit %d %s)", c.RestartCount, last.Reason, last.ExitCode, last.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
		}
	}
	return s
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// onRealNode pins a pod to the real node.
func onRealNode(spec corev1.PodSpec) corev1.PodSpec {
	spec.NodeSelector = map[string]string{cluster.LabelRealNode: "true"}
	return spec
}

// restricted is the pod security context every test pod gets: non-root
// as the image says, no capability, no escalation.
func restricted() *corev1.SecurityContext {
	no := false
	yes := true
	return &corev1.SecurityContext{
		RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
