//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/controller/sgxplugin"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The samples, applied with kubectl as SCONE's users do, reach HEALTHY and
// `kubectl get sgx` shows State, Desired and Ready.
func TestSamplesReachHealthy(t *testing.T) {
	c, cs, crs, _ := sharedOperator(t)
	out, err := kubectl(t, c, "apply", "-f", "config/samples/base_v1beta1_sgxplugin.yaml", "-f", "config/samples/base_v1beta1_las.yaml")
	if err != nil {
		t.Fatalf("applying the samples: %v\n%s", err, out)
	}
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "sgxplugin-sample"}}
	las := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: "las-sample"}}
	waitState(t, crs, plugin, common.StateHealthy)
	waitState(t, crs, las, common.StateHealthy)

	out, err = kubectl(t, c, "get", "sgx", "sgxplugin-sample")
	if err != nil {
		t.Fatalf("kubectl get sgx: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME STATE DESIRED READY AGE" {
		t.Fatalf("kubectl get sgx printed:\n%s", out)
	}
	nodes := len(mustNodes(t, cs))
	if f := strings.Fields(lines[1]); f[1] != "HEALTHY" || f[2] != fmt.Sprint(nodes) || f[3] != fmt.Sprint(nodes) {
		t.Errorf("kubectl get sgx row %q, want HEALTHY with %d desired and ready", lines[1], nodes)
	}
	if out, err := kubectl(t, c, "get", "las"); err != nil || !strings.Contains(out, "las-sample") || !strings.Contains(out, "HEALTHY") {
		t.Errorf("kubectl get las: %v\n%s", err, out)
	}

	// The per-node maps are the nodes' allocatable and what pods request.
	waitDevicesMatch(t, cs, crs, plugin)
	if n := plugin.Status.UsedSGXDevices; n < 1 {
		t.Errorf("usedSGXDevices %d: the LAS pod's enclave device is not counted", n)
	}
	if plugin.Status.SGXDeviceAlert != 0 || plugin.Status.SGXReplicaAlert != 0 {
		t.Errorf("alerts %d/%d on a healthy plugin", plugin.Status.SGXDeviceAlert, plugin.Status.SGXReplicaAlert)
	}
	if las.Status.DesiredNumberScheduled < 1 || las.Status.NumberAvailable != las.Status.DesiredNumberScheduled ||
		len(las.Status.Nodes) != int(las.Status.DesiredNumberScheduled) || las.Status.LASReplicaAlert != 0 {
		t.Errorf("LAS status %+v", las.Status)
	}
}

func mustNodes(t *testing.T, cs kubernetes.Interface) []corev1.Node {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nodes.Items
}

// expectedDevices computes the per-node enclave maps from the cluster
// itself, independently of the operator: allocatable of every node that has
// it, and the requests of the non-terminated pods bound there.
func expectedDevices(ctx context.Context, cs kubernetes.Interface) (capacity, used map[string]int32, err error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	capacity, used = map[string]int32{}, map[string]int32{}
	for _, n := range nodes.Items {
		if q, ok := n.Status.Allocatable[sgxplugin.ResourceEnclave]; ok && q.Value() > 0 {
			capacity[n.Name] = int32(q.Value()) //nolint:gosec // a device count, far below 2^31
			used[n.Name] = 0
		}
	}
	for _, p := range pods.Items {
		if _, ok := used[p.Spec.NodeName]; !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			q := ctr.Resources.Requests[sgxplugin.ResourceEnclave]
			used[p.Spec.NodeName] += int32(q.Value()) //nolint:gosec // a device count, far below 2^31
		}
	}
	return capacity, used, nil
}

func waitDevicesMatch(t *testing.T, cs kubernetes.Interface, crs client.Client, plugin *basev1beta1.SGXPlugin) {
	t.Helper()
	waitFor(t, "SGXPlugin device maps to match the cluster", time.Minute, func(ctx context.Context) (bool, string, error) {
		capacity, used, err := expectedDevices(ctx, cs)
		if err != nil {
			return false, err.Error(), nil
		}
		if err := crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
			return false, err.Error(), nil
		}
		st := plugin.Status
		available := map[string]int32{}
		for n, c := range capacity {
			available[n] = c - used[n]
		}
		ok := len(capacity) > 0 && maps.Equal(st.CapacitySGXDevicesPerNode, capacity) &&
			maps.Equal(st.UsedSGXDevicesPerNode, used) && maps.Equal(st.AvailableSGXDevicesPerNode, available)
		return ok, fmt.Sprintf("status capacity %v used %v available %v; cluster capacity %v used %v",
			st.CapacitySGXDevicesPerNode, st.UsedSGXDevicesPerNode, st.AvailableSGXDevicesPerNode, capacity, used), nil
	})
}

// Pods that take every enclave device of a node raise sgxDeviceAlert and
// make the plugin UNHEALTHY, with an event; deleting them heals it.
func TestDeviceAlertOnFullNode(t *testing.T) {
	_, cs, crs, _ := sharedOperator(t)
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "sgxplugin-sample"}}
	waitState(t, crs, plugin, common.StateHealthy)
	waitDevicesMatch(t, cs, crs, plugin)
	var node string
	var free int32
	for n, a := range plugin.Status.AvailableSGXDevicesPerNode {
		node, free = n, a
		break
	}
	if node == "" || free <= 0 {
		t.Fatalf("no SGX node with free devices: %v", plugin.Status.AvailableSGXDevicesPerNode)
	}

	ns := namespace(t, cs)
	enclaves := resource.NewQuantity(int64(free), resource.DecimalSI)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "enclaves", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{sgxplugin.ResourceEnclave: *enclaves},
				Limits:   corev1.ResourceList{sgxplugin.ResourceEnclave: *enclaves},
			}}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitState(t, crs, plugin, common.StateUnhealthy)
	if st := plugin.Status; st.SGXDeviceAlert != 1 || st.AvailableSGXDevicesPerNode[node] != 0 || st.UsedSGXDevicesPerNode[node] != st.CapacitySGXDevicesPerNode[node] {
		t.Errorf("full node %s: sgxDeviceAlert %d, per-node available %v used %v", node, st.SGXDeviceAlert,
			st.AvailableSGXDevicesPerNode, st.UsedSGXDevicesPerNode)
	}
	if c := findCondition(plugin.Status.Conditions, health.IsHealthy); c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != "SGXDeviceAlert" || !strings.Contains(c.Message, node) {
		t.Errorf("IsHealthy condition %+v, want False naming %s", c, node)
	}
	waitEvent(t, cs, plugin.Name, "Unhealthy", "HEALTHY -> UNHEALTHY")

	if err := cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitState(t, crs, plugin, common.StateHealthy)
	if plugin.Status.SGXDeviceAlert != 0 {
		t.Errorf("sgxDeviceAlert %d after the pods left", plugin.Status.SGXDeviceAlert)
	}
	waitEvent(t, cs, plugin.Name, "Healthy", "UNHEALTHY -> HEALTHY")
}

func findCondition[T ~string](conds []metav1.Condition, condType T) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == string(condType) {
			return &conds[i]
		}
	}
	return nil
}

// waitEvent waits for an event about the object called name with reason
// and a note containing note.
func waitEvent(t *testing.T, cs kubernetes.Interface, name, reason, note string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a %s event about %s", reason, name), time.Minute, func(ctx context.Context) (bool, string, error) {
		list, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name {
				if e.Reason == reason && strings.Contains(e.Note, note) {
					return true, "", nil
				}
				seen = append(seen, e.Reason+": "+e.Note)
			}
		}
		return false, fmt.Sprintf("events %v", seen), nil
	})
}
