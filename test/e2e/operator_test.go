//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
	"github.com/cloister-cc/cloister/internal/operator"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// operatorNamespace is where the operator keeps its lease and, by default,
// the objects of LAS and SGXPlugin.
const operatorNamespace = "cloister-system"

// repoRoot is the checkout this test runs in (test/e2e is two levels down).
func repoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		tb.Fatal(err)
	}
	return root
}

var builds struct {
	mu    sync.Mutex
	dir   string
	paths map[string]string
}

// build builds cmd/NAME once per test run: the tests run the real binaries,
// as `make demo` and a cluster do.
func build(name string) (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.paths[name]; ok {
		return p, nil
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "cloister-e2e-bin-")
		if err != nil {
			return "", err
		}
		builds.dir, builds.paths = dir, map[string]string{}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	path := filepath.Join(builds.dir, name)
	// make's build configuration, so the packages make demo compiled are
	// not compiled again in another.
	cmd := exec.Command("go", append(append([]string{"build"}, toolchain.BuildFlags...), "-o", path, "./cmd/"+name)...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), toolchain.BuildEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, out)
	}
	builds.paths[name] = path
	return path, nil
}

// binary is build for a test, which fails if the build does.
func binary(tb testing.TB, name string) string {
	tb.Helper()
	path, err := build(name)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// operatorBinary is the cloister-operator binary.
func operatorBinary(tb testing.TB) string { return binary(tb, "cloister-operator") }

// operatorProcess is one cloister-operator process against a dev cluster.
type operatorProcess struct {
	bin, kubeconfig, logPath string
	metricsAddr, probeAddr   string
	args                     []string // more flags

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func newOperator(tb testing.TB, c *cluster.Cluster) *operatorProcess {
	tb.Helper()
	return &operatorProcess{
		bin: operatorBinary(tb), kubeconfig: c.KubeconfigPath(),
		logPath:     filepath.Join(c.Workdir, "operator.log"),
		metricsAddr: freeAddr(tb), probeAddr: freeAddr(tb),
	}
}

// start runs the operator and waits until it answers /readyz.
func (o *operatorProcess) start(tb testing.TB) {
	tb.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	logFile, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(o.bin, append([]string{
		"--metrics-bind-address=" + o.metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=" + o.probeAddr,
		"--interrupted-release-after=5s", "--log-level=debug"}, o.args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+o.kubeconfig, "OPERATOR_NAMESPACE="+operatorNamespace)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting cloister-operator: %v", err)
	}
	o.cmd, o.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(o.done)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-o.done:
			return false, fmt.Errorf("cloister-operator exited: %s", cmd.ProcessState)
		default:
		}
		resp, err := http.Get("http://" + o.probeAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		if err := resp.Body.Close(); err != nil {
			tb.Fatal(err)
		}
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		tb.Fatalf("cloister-operator not ready: %v; log %s:\n%s", err, o.logPath, tailFile(o.logPath, 30))
	}
}

// signal sends sig and waits for the process to exit.
func (o *operatorProcess) signal(sig syscall.Signal) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return nil
	}
	_ = o.cmd.Process.Signal(sig)
	select {
	case <-o.done:
	case <-time.After(time.Minute):
		return fmt.Errorf("cloister-operator did not exit on %v", sig)
	}
	o.cmd = nil
	return nil
}

func (o *operatorProcess) kill(tb testing.TB) {
	tb.Helper()
	if err := o.signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
}

func (o *operatorProcess) stop(tb testing.TB) {
	tb.Helper()
	if err := o.signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
}

func (o *operatorProcess) pid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return 0
	}
	return o.cmd.Process.Pid
}

// apiRequests scrapes the operator's own count of API requests by method.
func (o *operatorProcess) apiRequests(tb testing.TB) map[string]float64 {
	tb.Helper()
	resp, err := http.Get("http://" + o.metricsAddr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	byMethod := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cloister_operator_api_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `method="`)
		method, _, _ := strings.Cut(rest, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			tb.Fatalf("parsing %q: %v", line, err)
		}
		byMethod[method] += v
	}
	if len(byMethod) == 0 {
		tb.Fatal("the operator exports no cloister_operator_api_requests_total")
	}
	return byMethod
}

// peakRSS is the operator process's high-water resident memory in bytes.
func (o *operatorProcess) peakRSS(tb testing.TB) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.pid()))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb * 1024
		}
	}
	tb.Fatal("no VmHWM in /proc status")
	return 0
}

func tailFile(path string, lines int) string {
	data, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// kubectl runs the pinned kubectl against c.
func kubectl(t testing.TB, c *cluster.Cluster, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tools(t).Path("kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath()}, args...)...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installCRDs applies charts/cloister-operator/files/crds as a user would and waits until the
// API server serves them; it also creates the operator's namespace.
func installCRDs(tb testing.TB, c *cluster.Cluster, cs kubernetes.Interface) {
	tb.Helper()
	if out, err := kubectl(tb, c, "apply", "--server-side", "-f", "charts/cloister-operator/files/crds"); err != nil {
		tb.Fatalf("installing CRDs: %v\n%s", err, out)
	}
	if out, err := kubectl(tb, c, "wait", "--for=condition=Established", "--timeout=60s", "-f", "charts/cloister-operator/files/crds"); err != nil {
		tb.Fatalf("waiting for CRDs: %v\n%s", err, out)
	}
	// The fixed roles the CAS chart binds CAS's and its backup's service accounts to, which
	// the operator's chart ships beside the CRDs.
	if out, err := kubectl(tb, c, "apply", "--server-side", "-f", "charts/cloister-operator/files/cas"); err != nil {
		tb.Fatalf("installing CAS's role: %v\n%s", err, out)
	}
	_, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	installDRAClasses(tb, c)
}

// installDRAClasses applies what the operator's chart ships for the DRA
// drivers: their DeviceClasses and the admission policies over their
// ResourceSlices and the CEX config sets' claims (the operator here runs
// beside the cluster, not from its chart).
func installDRAClasses(tb testing.TB, c *cluster.Cluster) {
	tb.Helper()
	out, err := charts.Render("cloister-operator", "cloister", operatorNamespace,
		map[string]any{"image": "registry.invalid/cloister-operator@sha256:" + strings.Repeat("0", 64)})
	if err != nil {
		tb.Fatal(err)
	}
	var docs []string
	for name, manifest := range out {
		if strings.HasSuffix(name, "/deviceclasses.yaml") || strings.HasSuffix(name, "/dra-admission.yaml") {
			docs = append(docs, manifest)
		}
	}
	if len(docs) != 2 {
		tb.Fatalf("the operator chart renders %d of its DRA templates, want 2", len(docs))
	}
	file := filepath.Join(tb.TempDir(), "dra.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		tb.Fatal(err)
	}
	if out, err := kubectl(tb, c, "apply", "--server-side", "-f", file); err != nil {
		tb.Fatalf("installing the DRA DeviceClasses and policies: %v\n%s", err, out)
	}
}

var sharedOp struct {
	once sync.Once
	op   *operatorProcess
	crs  client.WithWatch
}

// sharedOperator is the operator of the shared cluster, with the CRDs
// installed; TestMain stops it. A test that kills it starts it again.
func sharedOperator(t *testing.T) (*cluster.Cluster, kubernetes.Interface, client.WithWatch, *operatorProcess) {
	t.Helper()
	c, cs := sharedCluster(t)
	sharedOp.once.Do(func() {
		installCRDs(t, c, cs)
		cfg, err := c.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		scheme, err := operator.Scheme()
		if err != nil {
			t.Fatal(err)
		}
		if sharedOp.crs, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
			t.Fatal(err)
		}
		sharedOp.op = newOperator(t, c)
		sharedOp.op.start(t)
	})
	if sharedOp.op == nil || sharedOp.op.pid() == 0 {
		t.Fatal("the shared operator is not running (an earlier test failed to start it)")
	}
	return c, cs, sharedOp.crs, sharedOp.op
}

// serviceCR is what the tests read of LAS and SGXPlugin CRs.
type serviceCR interface {
	client.Object
	GetServiceStatus() *common.ServiceStatus
}

// poll checks cond every interval until it holds, failing tb after
// timeout with the last reason cond gave.
func poll(tb testing.TB, what string, interval, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) {
	tb.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why, err := cond(ctx)
		// The call the deadline cut short says only that: keep what the
		// one before it saw.
		if ctx.Err() == nil || last == "" {
			last = why
		}
		return ok, err
	})
	if err != nil {
		tb.Fatalf("waiting for %s: %v (last seen: %s)", what, err, last)
	}
}

// waitFor polls cond every 100 ms for at most timeout.
func waitFor(tb testing.TB, what string, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) {
	tb.Helper()
	poll(tb, what, 100*time.Millisecond, timeout, cond)
}

// inState holds when the CR's state is want and its status describes its
// latest generation; it says what it saw otherwise.
func inState(crs client.Client, obj serviceCR, want common.State) func(ctx context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		if err := crs.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error(), nil
		}
		st := obj.GetServiceStatus()
		return st.State == want && st.ObservedGeneration == obj.GetGeneration(),
			fmt.Sprintf("state %s, generation %d observed %d, conditions %v", st.State, obj.GetGeneration(), st.ObservedGeneration, notDesired(st.Conditions)), nil
	}
}

// waitState waits until the CR's state is want and its status describes
// its latest generation.
func waitState(t testing.TB, crs client.Client, obj serviceCR, want common.State) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%T %s to be %s", obj, obj.GetName(), want), 2*time.Minute, inState(crs, obj, want))
}

// notDesired lists the conditions that are not as a HEALTHY CR shows
// them, for failure messages.
func notDesired(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		if !health.IsDesired(c) {
			out = append(out, c.Type+"="+string(c.Status)+"("+c.Reason+")")
		}
	}
	return out
}
