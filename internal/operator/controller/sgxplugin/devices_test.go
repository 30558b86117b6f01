package sgxplugin

import (
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
)

// Small builders, as cert-manager's tests use them.

func node(name string, enclave, provision int64, labels ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	if enclave > 0 {
		n.Status.Allocatable[ResourceEnclave] = *resource.NewQuantity(enclave, resource.DecimalSI)
	}
	if provision > 0 {
		n.Status.Allocatable[ResourceProvision] = *resource.NewQuantity(provision, resource.DecimalSI)
	}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		n.Labels[k] = v
	}
	return n
}

type podOpt func(*corev1.Pod)

func pod(name, nodeName string, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}}}
	p.Status.Phase = corev1.PodRunning
	for _, o := range opts {
		o(&p)
	}
	return p
}

func requests(r corev1.ResourceName, n int64) podOpt {
	return func(p *corev1.Pod) {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{r: q}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{r: q}
	}
}

func initRequests(n int64) podOpt {
	return func(p *corev1.Pod) {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{ResourceEnclave: q}, Limits: corev1.ResourceList{ResourceEnclave: q}}}}
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func daemonSet(desired, ready int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberReady: ready}}
}

func TestDevices(t *testing.T) {
	cluster := []corev1.Node{
		node("sgx-0", 110, 110, "cloister.dev/sgx=true"),
		node("sgx-5", 110, 110, "cloister.dev/sgx=true"),
		node("snp-1", 0, 0),
	}
	tests := []struct {
		name                      string
		nodes                     []corev1.Node
		pods                      []corev1.Pod
		ds                        *appsv1.DaemonSet
		capacity, used, available int32
		availablePerNode          map[string]int32
		deviceAlert, replicaAlert int32
		desired, ready            int32
		healthy                   string
		reason                    string
	}{
		{"idle cluster", cluster, nil, daemonSet(3, 3),
			220, 0, 220, map[string]int32{"sgx-0": 110, "sgx-5": 110}, 0, 0, 3, 3, "True", "NoAlerts"},
		{"pods using devices; finished and unscheduled pods do not count", cluster, []corev1.Pod{
			pod("a", "sgx-0", requests(ResourceEnclave, 3)),
			pod("b", "sgx-0", requests(ResourceEnclave, 5), phase(corev1.PodSucceeded)),
			pod("c", "sgx-5", requests(ResourceEnclave, 2), phase(corev1.PodFailed)),
			pod("d", "", requests(ResourceEnclave, 7)),
			pod("e", "snp-1"),
		}, daemonSet(3, 3),
			220, 3, 217, map[string]int32{"sgx-0": 107, "sgx-5": 110}, 0, 0, 3, 3, "True", "NoAlerts"},
		{"init containers count as the scheduler counts them", cluster, []corev1.Pod{
			pod("a", "sgx-5", requests(ResourceEnclave, 1), initRequests(4)),
		}, daemonSet(3, 3),
			220, 4, 216, map[string]int32{"sgx-0": 110, "sgx-5": 106}, 0, 0, 3, 3, "True", "NoAlerts"},
		{"every enclave of one node in use", cluster, []corev1.Pod{
			pod("a", "sgx-0", requests(ResourceEnclave, 100)), pod("b", "sgx-0", requests(ResourceEnclave, 10)),
		}, daemonSet(3, 3),
			220, 110, 110, map[string]int32{"sgx-0": 0, "sgx-5": 110}, 1, 0, 3, 3, "False", "SGXDeviceAlert"},
		{"provision devices exhausted is a device alert too", cluster, []corev1.Pod{
			pod("a", "sgx-5", requests(ResourceProvision, 110)),
		}, daemonSet(3, 3),
			220, 0, 220, map[string]int32{"sgx-0": 110, "sgx-5": 110}, 1, 0, 3, 3, "False", "SGXDeviceAlert"},
		{"a labelled node whose plugin has not registered yet", []corev1.Node{node("sgx-0", 0, 0, "cloister.dev/sgx=true")}, nil, daemonSet(1, 1),
			0, 0, 0, map[string]int32{"sgx-0": 0}, 1, 0, 1, 1, "False", "SGXDeviceAlert"},
		{"plugin not ready everywhere", cluster, nil, daemonSet(3, 2),
			220, 0, 220, map[string]int32{"sgx-0": 110, "sgx-5": 110}, 0, 1, 3, 2, "False", "SGXReplicaAlert"},
		{"plugin not deployed: replicas cannot be determined", cluster, nil, nil,
			220, 0, 220, map[string]int32{"sgx-0": 110, "sgx-5": 110}, 0, -1, -1, -1, "Unknown", "PluginNotDeployed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, h := Devices(tt.nodes, tt.pods, tt.ds)
			if st.CapacitySGXDevices != tt.capacity || st.UsedSGXDevices != tt.used || st.AvailableSGXDevices != tt.available {
				t.Errorf("capacity/used/available = %d/%d/%d, want %d/%d/%d",
					st.CapacitySGXDevices, st.UsedSGXDevices, st.AvailableSGXDevices, tt.capacity, tt.used, tt.available)
			}
			if !maps.Equal(st.AvailableSGXDevicesPerNode, tt.availablePerNode) {
				t.Errorf("available per node %v, want %v", st.AvailableSGXDevicesPerNode, tt.availablePerNode)
			}
			for n, c := range st.CapacitySGXDevicesPerNode {
				if c-st.UsedSGXDevicesPerNode[n] != st.AvailableSGXDevicesPerNode[n] && st.AvailableSGXDevicesPerNode[n] != 0 {
					t.Errorf("node %s: capacity %d - used %d != available %d", n, c, st.UsedSGXDevicesPerNode[n], st.AvailableSGXDevicesPerNode[n])
				}
			}
			if st.SGXDeviceAlert != tt.deviceAlert || st.SGXReplicaAlert != tt.replicaAlert {
				t.Errorf("alerts device %d replica %d, want %d %d", st.SGXDeviceAlert, st.SGXReplicaAlert, tt.deviceAlert, tt.replicaAlert)
			}
			if st.DesiredReplicas != tt.desired || st.ReadyReplicas != tt.ready {
				t.Errorf("replicas %d/%d, want %d/%d", st.ReadyReplicas, st.DesiredReplicas, tt.ready, tt.desired)
			}
			if string(h.Status) != tt.healthy || string(h.Reason) != tt.reason {
				t.Errorf("IsHealthy %s (%s: %s), want %s (%s)", h.Status, h.Reason, h.Message, tt.healthy, tt.reason)
			}
		})
	}
}

func TestRequestsSGX(t *testing.T) {
	if !RequestsSGX(ptr(pod("a", "n", requests(ResourceEnclave, 1)))) || !RequestsSGX(ptr(pod("b", "n", initRequests(1)))) {
		t.Error("SGX pods not recognised")
	}
	if RequestsSGX(ptr(pod("c", "n"))) {
		t.Error("plain pod taken for an SGX pod")
	}

}

func ptr[T any](v T) *T { return &v }

// Each SGX node's EPC and what its running pods requested of it, counted
// as the scheduler counts them; nodes without EPC are left out.
func TestEPCPerNode(t *testing.T) {
	withEPC := node("sgx-0", 110, 110, "cloister.dev/sgx=true")
	withEPC.Status.Capacity = corev1.ResourceList{ResourceEPC: resource.MustParse("96Mi")}
	epcLimit := func(n string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{ResourceEPC: resource.MustParse(n)}
		}
	}
	initEPC := func(n string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{ResourceEPC: resource.MustParse(n)}}}}
		}
	}
	st, _ := Devices([]corev1.Node{withEPC, node("sgx-5", 110, 110, "cloister.dev/sgx=true")}, []corev1.Pod{
		pod("a", "sgx-0", epcLimit("32Mi")),
		pod("b", "sgx-0", epcLimit("8Mi"), initEPC("16Mi")), // 16Mi: its init container's
		pod("c", "sgx-0", epcLimit("64Mi"), phase(corev1.PodSucceeded)),
		pod("d", "sgx-5", epcLimit("64Mi")),
	}, daemonSet(2, 2))
	if !maps.Equal(st.CapacityEPCBytesPerNode, map[string]int64{"sgx-0": 96 << 20}) || !maps.Equal(st.UsedEPCBytesPerNode, map[string]int64{"sgx-0": 48 << 20}) {
		t.Errorf("EPC capacity %v used %v", st.CapacityEPCBytesPerNode, st.UsedEPCBytesPerNode)
	}
}

// The EPC per node is exported beside the device counts.
func TestEPCMetrics(t *testing.T) {
	p := &basev1beta1.SGXPlugin{Status: basev1beta1.SGXPluginStatus{
		CapacityEPCBytesPerNode: map[string]int64{"sgx-0": 96 << 20}, UsedEPCBytesPerNode: map[string]int64{"sgx-0": 48 << 20}}}
	got := map[string]float64{}
	for _, s := range (&Kind{}).Metrics(p) {
		if s.Node != "" {
			got[s.Field+"/"+s.Node] = s.Value
		}
	}
	if got["capacityEPCBytes/sgx-0"] != 96<<20 || got["usedEPCBytes/sgx-0"] != 48<<20 {
		t.Errorf("samples %v", got)
	}
}

// Under DRA a node's EPC is its enclave device's capacity, and in use is
// what the claims of it consumed; other drivers and nodes not selected do
// not count.
func TestEPCPerNodeUnderDRA(t *testing.T) {
	node := func(n string) corev1.Node { return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	slice := func(driver, n string, epc string) resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &n, Devices: []resourceapi.Device{
			{Name: "enclave", Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"epc": {Value: resource.MustParse(epc)}}}}}}
	}
	claim := func(pool, epc string) resourceapi.ResourceClaim {
		return resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Driver: "sgx.cloister.dev", Pool: pool, Device: "enclave",
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"epc": resource.MustParse(epc)}}}}}}}
	}
	capacity, used := epcDRA([]corev1.Node{node("a"), node("b")},
		[]resourceapi.ResourceSlice{slice("sgx.cloister.dev", "a", "1536Mi"), slice("sgx.cloister.dev", "c", "1Gi"), slice("other.dev", "b", "1Gi")},
		[]resourceapi.ResourceClaim{claim("a", "1Gi"), claim("a", "256Mi"), claim("c", "1Gi"), {}})
	if len(capacity) != 1 || capacity["a"] != 1536<<20 || used["a"] != 1280<<20 {
		t.Errorf("capacity %v, used %v", capacity, used)
	}
}
