//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/cli"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
)

func cloister(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRoot(cli.Streams{Out: &out, Err: &errOut})
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("cloister %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String()
}

func nodeUIDs(t *testing.T, c *cluster.Cluster) map[string]types.UID {
	t.Helper()
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	list, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, n := range list.Items {
		uids[n.Name] = n.UID
	}
	return uids
}

// `cloister dev up` twice changes nothing, survives its processes being
// killed, and `dev down` leaves no process and no folder behind.
func TestDevUpIsIdempotentAndDownLeavesNothing(t *testing.T) {
	tools(t)
	name := "e2e-life-" + strings.TrimLeft(time.Now().Format("150405.000"), "0")
	name = strings.ReplaceAll(name, ".", "")
	c := &cluster.Cluster{Name: name}
	t.Cleanup(func() { cloister(t, "dev", "down", "--name", name) })

	kubeconfig, summary := cloister(t, "dev", "up", "--name", name, "--nodes", "2")
	kubeconfig = strings.TrimSpace(kubeconfig)
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("dev up printed kubeconfig %q: %v", kubeconfig, err)
	}
	if !strings.Contains(summary, "2 nodes Ready") {
		t.Errorf("summary %q does not report 2 Ready nodes", summary)
	}
	printed, _ := cloister(t, "dev", "kubeconfig", "--name", name)
	if strings.TrimSpace(printed) != kubeconfig {
		t.Errorf("dev kubeconfig = %q, dev up printed %q", printed, kubeconfig)
	}
	// The CLI put the cluster under the toolchain cache; address it directly.
	c.Workdir = strings.TrimSuffix(kubeconfig, "/clusters/"+name+"/kubeconfig.yaml")
	first := nodeUIDs(t, c)
	procs, err := c.Processes()
	if err != nil || len(procs) < 5 {
		t.Fatalf("cluster processes %v (%v), want at least 5", procs, err)
	}

	cloister(t, "dev", "up", "--name", name, "--nodes", "2")
	if again := nodeUIDs(t, c); !maps.Equal(first, again) {
		t.Errorf("second dev up changed the nodes: %v -> %v", first, again)
	}
	if again, _ := c.Processes(); len(again) != len(procs) {
		t.Errorf("second dev up changed the processes: %v -> %v", procs, again)
	}

	// A crash (every process killed) is recovered from its data by the next up.
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	cloister(t, "dev", "up", "--name", name, "--nodes", "2")
	if again := nodeUIDs(t, c); !maps.Equal(first, again) {
		t.Errorf("dev up after a crash lost the nodes: %v -> %v", first, again)
	}

	// A user's `tail -f` on a cluster log is not part of the cluster.
	follower := exec.Command("tail", "-f", c.Dir()+"/logs/kube-apiserver.log")
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follower.Process.Kill() }()

	_, msg := cloister(t, "dev", "down", "--name", name)
	if !strings.Contains(msg, "removed") {
		t.Errorf("dev down said %q", msg)
	}
	if left, err := c.Processes(); err != nil || len(left) > 0 {
		t.Errorf("processes left after dev down: %v (%v)", left, err)
	}
	if err := follower.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("dev down killed an unrelated process that had a cluster file open: %v", err)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Errorf("cluster folder %s left after dev down (%v)", c.Dir(), err)
	}
	_, msg = cloister(t, "dev", "down", "--name", name)
	if !strings.Contains(msg, "does not exist") {
		t.Errorf("second dev down said %q", msg)
	}
}
