package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// reconcileNodes against a real kube-apiserver: create, no-op, repair drift,
// scale down, and never touch a node it does not manage.
func TestReconcileNodes(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(testenv.Start(t, testenv.Options{}))
	nodes := cs.CoreV1().Nodes()

	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: map[string]string{"team": "x"}}}
	if _, err := nodes.Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := reconcileNodes(ctx, cs, 3); err != nil {
		t.Fatalf("first reconcile: %v", err)
	}
	versions := map[string]string{}
	for i := range 3 {
		n, err := nodes.Get(ctx, NodeName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s not created: %v", NodeName(i), err)
		}
		want := DesiredNode(i)
		if !sameResources(n.Status.Allocatable, want.Status.Allocatable) || !containsAll(n.Labels, want.Labels) {
			t.Errorf("node %s stored as labels %v allocatable %v, want %v %v",
				n.Name, n.Labels, n.Status.Allocatable, want.Labels, want.Status.Allocatable)
		}
		versions[n.Name] = n.ResourceVersion
	}

	// Converged: a second pass writes nothing.
	if err := reconcileNodes(ctx, cs, 3); err != nil {
		t.Fatalf("second reconcile: %v", err)
	}
	for name, rv := range versions {
		n, _ := nodes.Get(ctx, name, metav1.GetOptions{})
		if n.ResourceVersion != rv {
			t.Errorf("idle reconcile rewrote node %s (resourceVersion %s -> %s)", name, rv, n.ResourceVersion)
		}
	}

	// Drift: a lost label and a shrunken SGX allocatable are restored.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelTEE: nil}}})
	if _, err := nodes.Patch(ctx, "sgx-0", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	patch, _ = json.Marshal(map[string]any{"status": map[string]any{"allocatable": map[string]any{string(ResourceSGXEnclave): "1"}}})
	if _, err := nodes.PatchStatus(ctx, "sgx-0", patch); err != nil {
		t.Fatal(err)
	}
	if err := reconcileNodes(ctx, cs, 3); err != nil {
		t.Fatalf("repairing reconcile: %v", err)
	}
	n, _ := nodes.Get(ctx, "sgx-0", metav1.GetOptions{})
	if n.Labels[LabelTEE] != "sgx" {
		t.Errorf("label %s not restored: %v", LabelTEE, n.Labels)
	}
	if q := n.Status.Allocatable[ResourceSGXEnclave]; q.Cmp(resource.MustParse("110")) != 0 {
		t.Errorf("allocatable %s = %s after repair, want 110", ResourceSGXEnclave, q.String())
	}

	// Scale down: surplus managed nodes go, the foreign node stays.
	if err := reconcileNodes(ctx, cs, 1); err != nil {
		t.Fatalf("scale-down reconcile: %v", err)
	}
	list, err := nodes.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	if len(names) != 2 || !slices.Contains(names, "sgx-0") || !slices.Contains(names, "foreign") {
		t.Errorf("after scaling to 1 the nodes are %v, want [foreign sgx-0]", names)
	}
}
