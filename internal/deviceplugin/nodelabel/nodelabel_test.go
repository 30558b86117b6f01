package nodelabel

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

func TestSetLabelAndMaxPods(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(testenv.Start(t, testenv.Options{}))
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sgx-0", Labels: map[string]string{"keep": "me"}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("58")}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := &Node{Client: cs, Name: "sgx-0"}
	labels := func() map[string]string {
		got, err := cs.CoreV1().Nodes().Get(ctx, "sgx-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Labels
	}
	v := "true"
	if err := n.SetLabel(ctx, "cloister.dev/sgx", &v); err != nil {
		t.Fatal(err)
	}
	if l := labels(); l["cloister.dev/sgx"] != "true" || l["keep"] != "me" {
		t.Errorf("labels after set: %v", l)
	}
	if err := n.SetLabel(ctx, "cloister.dev/sgx", nil); err != nil {
		t.Fatal(err)
	}
	if l := labels(); l["cloister.dev/sgx"] != "" || l["keep"] != "me" {
		t.Errorf("labels after removal: %v", l)
	}
	if p, err := n.MaxPods(ctx); err != nil || p != 58 {
		t.Errorf("MaxPods = %d, %v; want 58", p, err)
	}
	missing := &Node{Client: cs, Name: "gone"}
	if err := missing.SetLabel(ctx, "k", &v); err == nil {
		t.Error("labelling a missing node succeeded")
	}
}

// An extended resource of the node's status is set, changed and removed
// on a real API server, other resources left alone; a Capacity patches
// only when its value changes.
func TestCapacity(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(testenv.Start(t, testenv.Options{}))
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sgx-1"}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("58")}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	capacity := func() corev1.ResourceList {
		got, err := cs.CoreV1().Nodes().Get(ctx, "sgx-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Status.Capacity
	}
	counting := &countingSetter{Node: &Node{Client: cs, Name: "sgx-1"}}
	c := &Capacity{Setter: counting, Name: "sgx.cloister.dev/epc"}
	c.Sync(ctx, 64<<20, nil)
	c.Sync(ctx, 64<<20, nil)
	if got := capacity(); got.Name("sgx.cloister.dev/epc", resource.BinarySI).Value() != 64<<20 || got.Pods().Value() != 58 || counting.n != 1 {
		t.Errorf("capacity %v after %d patches", got, counting.n)
	}
	c.Sync(ctx, 0, errors.New("sysfs unreadable"))
	if got := capacity(); got.Name("sgx.cloister.dev/epc", resource.BinarySI).Value() != 64<<20 {
		t.Errorf("an unreadable value changed the capacity: %v", got)
	}
	c.Sync(ctx, 0, nil)
	if got := capacity(); !got.Name("sgx.cloister.dev/epc", resource.BinarySI).IsZero() || got.Pods().Value() != 58 {
		t.Errorf("capacity after removal: %v", got)
	}
}

type countingSetter struct {
	*Node
	n int
}

func (c *countingSetter) SetCapacity(ctx context.Context, name string, value *resource.Quantity) error {
	c.n++
	return c.Node.SetCapacity(ctx, name, value)
}
