//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

const waitTimeout = 90 * time.Second

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	waitFor(t, what, waitTimeout, func(ctx context.Context) (bool, string, error) {
		ok, err := cond(ctx)
		return ok, "", err
	})
}

func TestNodesLookLikeTEEHosts(t *testing.T) {
	_, cs := sharedCluster(t)
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != cluster.DefaultNodes {
		t.Fatalf("%d nodes, want %d", len(nodes.Items), cluster.DefaultNodes)
	}
	tees := map[string]corev1.Node{}
	for _, n := range nodes.Items {
		tees[n.Labels[cluster.LabelTEE]] = n
	}
	for _, p := range cluster.Profiles {
		n, ok := tees[p.TEE]
		if !ok {
			t.Errorf("no node labelled %s=%s", cluster.LabelTEE, p.TEE)
			continue
		}
		for r, want := range p.Resources {
			if q := n.Status.Allocatable[r]; q.Value() != want {
				t.Errorf("node %s allocatable %s = %s, want %d (kwok kept or lost it?)", n.Name, r, q.String(), want)
			}
		}
	}
}

func TestDeploymentReachesAvailable(t *testing.T) {
	_, cs := sharedCluster(t)
	ns := namespace(t, cs)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "3 available replicas", func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 3, nil
	})
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			t.Errorf("pod %s is %s on %q, want Running on a node", p.Name, p.Status.Phase, p.Spec.NodeName)
		}
	}
}

// A LAS-like DaemonSet: one pod per node, each holding the same hostPort.
func TestDaemonSetWithHostPortRunsOnEveryNode(t *testing.T) {
	_, cs := sharedCluster(t)
	ns := namespace(t, cs)
	labels := map[string]string{"app": "las"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "las", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "las", Image: "registry.invalid/las:1",
					Ports: []corev1.ContainerPort{{ContainerPort: 18766, HostPort: 18766}},
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a ready LAS pod on every node", func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "las", metav1.GetOptions{})
		return err == nil && d.Status.DesiredNumberScheduled == cluster.DefaultNodes &&
			d.Status.NumberReady == cluster.DefaultNodes, nil
	})
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s on %s is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != cluster.DefaultNodes {
		t.Errorf("hostPort pods on %d distinct nodes, want %d", len(nodes), cluster.DefaultNodes)
	}
}

func sgxPod(name string, enclaves int64) *corev1.Pod {
	q := *resource.NewQuantity(enclaves, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "enclave", Image: "registry.invalid/enclave:1",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{cluster.ResourceSGXEnclave: q},
				Limits:   corev1.ResourceList{cluster.ResourceSGXEnclave: q},
			},
		}}},
	}
}

// The extended resource is real to the scheduler: a pod that fits runs on
// the SGX node, one that asks for more than any node has stays Pending.
func TestSGXResourceIsScheduledByCapacity(t *testing.T) {
	_, cs := sharedCluster(t)
	ns := namespace(t, cs)
	pods := cs.CoreV1().Pods(ns)
	ctx := context.Background()

	if _, err := pods.Create(ctx, sgxPod("fits", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fitting SGX pod to run", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "fits", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	fits, _ := pods.Get(ctx, "fits", metav1.GetOptions{})
	node, err := cs.CoreV1().Nodes().Get(ctx, fits.Spec.NodeName, metav1.GetOptions{})
	if err != nil || node.Labels[cluster.LabelTEE] != "sgx" {
		t.Errorf("SGX pod scheduled to %q (labels %v), want an sgx node", fits.Spec.NodeName, node.Labels)
	}

	const tooMany = 111 // capacity is 110 per SGX node
	if _, err := pods.Create(ctx, sgxPod("too-big", tooMany), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var message string
	eventually(t, "a FailedScheduling event for the oversized SGX pod", func(ctx context.Context) (bool, error) {
		events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": "too-big", "reason": "FailedScheduling"}.String(),
		})
		if err != nil || len(events.Items) == 0 {
			return false, nil
		}
		message = events.Items[0].Message
		return true, nil
	})
	// With the SGX DeviceClass mapping the resource (DRA's extended
	// resources), the scheduler may refuse the request there first: a
	// claim holds at most 32 devices.
	if !strings.Contains(message, "Insufficient "+string(cluster.ResourceSGXEnclave)) && !strings.Contains(message, "exceeds the claim limit") {
		t.Errorf("FailedScheduling says %q, want Insufficient %s", message, cluster.ResourceSGXEnclave)
	}
	p, err := pods.Get(ctx, "too-big", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("oversized pod is %s on %q (%v), want Pending and unscheduled", p.Status.Phase, p.Spec.NodeName, err)
	}
}

// kwokctl picks command-line flags by the version the binaries report; an
// unstamped build says v0.0.0-master.
func TestComponentsReportPinnedVersion(t *testing.T) {
	tc := tools(t)
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		out, err := exec.Command(tc.Path(name), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v", name, err)
		}
		if got := strings.TrimSpace(string(out)); got != "Kubernetes "+toolchain.KubeVersion {
			t.Errorf("%s --version = %q, want Kubernetes %s", name, got, toolchain.KubeVersion)
		}
	}
	_, cs := sharedCluster(t)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != toolchain.KubeVersion {
		t.Errorf("cluster reports %s, want %s", v.GitVersion, toolchain.KubeVersion)
	}
}

func ptr[T any](v T) *T { return &v }
