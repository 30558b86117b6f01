//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The CEXPlugin sample runs the plugin on the s390x node only, with its
// config sets in a ConfigMap, counts the node's ibm.com/cex-ep11 devices,
// and turns UNHEALTHY while a pod holds every one of them.
func TestCEXPluginSample(t *testing.T) {
	c, cs, crs, _ := sharedOperator(t)
	if out, err := kubectl(t, c, "apply", "-f", "config/samples/base_v1beta1_cexplugin.yaml"); err != nil {
		t.Fatalf("applying the sample: %v\n%s", err, out)
	}
	plugin := &basev1beta1.CEXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "cexplugin-sample"}}
	t.Cleanup(func() { _ = crs.Delete(context.Background(), plugin) })
	waitState(t, crs, plugin, common.StateHealthy)

	out, err := kubectl(t, c, "get", "cex", "cexplugin-sample")
	if err != nil {
		t.Fatalf("kubectl get cex: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME TYPE STATE DESIRED READY AGE" {
		t.Fatalf("kubectl get cex printed:\n%s", out)
	}
	// One s390x node among the dev cluster's five: the plugin runs there only.
	if f := strings.Fields(lines[1]); f[1] != "ep11" || f[2] != "HEALTHY" || f[3] != "1" || f[4] != "1" {
		t.Errorf("kubectl get cex row %q, want ep11 HEALTHY 1 1", lines[1])
	}
	var node string
	for n := range plugin.Status.CapacityDevicesPerNode {
		node = n
	}
	zNode, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := zNode.Status.Allocatable["ibm.com/cex-ep11"]
	if len(plugin.Status.CapacityDevicesPerNode) != 1 || zNode.Labels["kubernetes.io/arch"] != "s390x" ||
		int64(plugin.Status.CapacityDevices) != want.Value() || plugin.Status.AvailableDevices != plugin.Status.CapacityDevices {
		t.Errorf("status %+v, want node %s's %s devices", plugin.Status, node, want.String())
	}

	cms, err := cs.CoreV1().ConfigMaps("cloister-system").Get(context.Background(), "cex-cexplugin-sample-config-sets", metav1.GetOptions{})
	if err != nil || !strings.Contains(cms.Data["config-sets.json"], `"name":"payments"`) {
		t.Errorf("config sets ConfigMap: %v %v", cms, err)
	}

	ns := namespace(t, cs)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crypto", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"ibm.com/cex-ep11": want},
				Limits:   corev1.ResourceList{"ibm.com/cex-ep11": want},
			}}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, crs, plugin, common.StateUnhealthy)
	if c := findCondition(plugin.Status.Conditions, health.IsHealthy); plugin.Status.CEXDeviceAlert != 1 || c == nil ||
		c.Reason != "CEXDeviceAlert" || !strings.Contains(c.Message, node) {
		t.Errorf("cexDeviceAlert %d, IsHealthy %+v: want 1 naming %s", plugin.Status.CEXDeviceAlert, c, node)
	}
	if err := cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitState(t, crs, plugin, common.StateHealthy)
}
