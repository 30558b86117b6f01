package nodelabel

import (
	"context"
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
