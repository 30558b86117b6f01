//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/cli"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/cluster/hostnet"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
	"github.com/cloister-cc/cloister/internal/operator/install"
)

// A simulated pod's address, a simulated node's and a Service's that
// nothing backs go nowhere: the API server's egress proxy refuses them at
// once, and (as root) the host has no route to them, so a connection
// fails at once on this machine instead of leaving it.
func TestSimulatedAddressesGoNowhere(t *testing.T) {
	c, cs := sharedCluster(t)
	ctx := context.Background()
	node := cluster.NodeName(0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nowhere", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nowhere", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"}, Ports: []corev1.ServicePort{{Port: 443}}}}
	svc, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services("default").Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
	var podIP string
	waitFor(t, "the simulated pod's IP", time.Minute, func(ctx context.Context) (bool, string, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		podIP = p.Status.PodIP
		return podIP != "" && p.Status.Phase == corev1.PodRunning, string(p.Status.Phase), nil
	})
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]netip.Addr{
		"a simulated pod":     netip.MustParseAddr(podIP),
		"a simulated node":    netip.MustParseAddr(internalIPOf(n)),
		"an unbacked Service": netip.MustParseAddr(svc.Spec.ClusterIP),
	}

	// The API server asks the node's kubelet for the logs: its egress proxy
	// refuses the simulated node's address before anything is dialled.
	start := time.Now()
	out, err := kubectl(t, c, "logs", "-n", "default", pod.Name)
	if err == nil || !strings.Contains(out, internalIPOf(n)+" is a simulated node's address: nothing runs there") || time.Since(start) > 5*time.Second {
		t.Errorf("kubectl logs of a simulated pod: %v after %s\n%s", err, time.Since(start), out)
	}

	if os.Geteuid() != 0 {
		testskip.Skipf(t, "the host's routing rules need root; without them only the egress proxy keeps the API server's traffic here (checked above)")
	}
	// The kernel first: nothing is dialled unless it has no route.
	h := &hostnet.Host{}
	for what, a := range addrs {
		if err := h.Unreachable(a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for what, a := range addrs {
		start := time.Now()
		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(a, 443).String(), 2*time.Second)
		if err == nil {
			_ = conn.Close()
		}
		if !errors.Is(err, syscall.EHOSTUNREACH) || time.Since(start) > time.Second {
			t.Errorf("dialing %s %s: %v after %s, want no route to host at once", what, a, err, time.Since(start))
		}
	}
	// The audit's own probe, from a namespace of its own through the host:
	// counted at the host, routed nowhere.
	if netAudit != nil {
		if err := netAudit.sendProbe(); err != nil {
			t.Error(err)
		}
	}
}

func internalIPOf(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// On a dev cluster without a real node no node runs pods: install refuses
// before writing anything, naming why and how to get a node; its check
// says the same.
func TestInstallWithoutARealNode(t *testing.T) {
	c, cs := sharedCluster(t)
	img := "ghcr.io/cloister-cc/cloister-operator@sha256:" + strings.Repeat("1", 64)
	for _, args := range [][]string{{"--reconcile"}, {}} {
		var out, errOut bytes.Buffer
		root := cli.NewRoot(cli.Streams{Out: &out, Err: &errOut})
		root.SetArgs(append([]string{"install", "--kubeconfig", c.KubeconfigPath(), "--image", img}, args...))
		err := root.ExecuteContext(context.Background())
		said := out.String() + fmt.Sprint(err)
		if err == nil || !strings.Contains(said, "this dev cluster has no real node, and its simulated nodes run nothing: no node can run the operator") ||
			!strings.Contains(said, "cloister dev up --real-node") || strings.Contains(said, "--reconcile repairs these") {
			t.Errorf("install %v: %v\n%s", args, err, out.String())
		}
	}
	if _, err := cs.AppsV1().Deployments(operatorNamespace).Get(context.Background(), install.Deployment, metav1.GetOptions{}); err == nil {
		t.Error("the refused install deployed the operator")
	}
}
