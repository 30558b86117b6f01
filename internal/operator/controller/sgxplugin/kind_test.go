package sgxplugin

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// The kind fills each SGX node's EPC and its pods' use of it from what it
// reads of a real API server.
func TestFillStatusEPC(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(testenv.Start(t, testenv.Options{}), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sgx-0", Labels: map[string]string{LabelSGX: "true"}}}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Capacity = corev1.ResourceList{ResourceEPC: resource.MustParse("96Mi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Allocatable = n.Status.Capacity
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "enclave", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "sgx-0",
		Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{ResourceEPC: resource.MustParse("32Mi")}}}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p := &basev1beta1.SGXPlugin{}
	New(service.Base{Reader: c}).FillStatus(ctx, p, nil)
	if !maps.Equal(p.Status.CapacityEPCBytesPerNode, map[string]int64{"sgx-0": 96 << 20}) || !maps.Equal(p.Status.UsedEPCBytesPerNode, map[string]int64{"sgx-0": 32 << 20}) {
		t.Errorf("EPC capacity %v used %v", p.Status.CapacityEPCBytesPerNode, p.Status.UsedEPCBytesPerNode)
	}
}
