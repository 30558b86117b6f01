package sgxplugin

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The resources the SGX device plugin registers, and the label of SGX nodes.
const (
	ResourceEnclave   corev1.ResourceName = tee.SGXEnclave
	ResourceProvision corev1.ResourceName = tee.SGXProvision
	ResourceEPC       corev1.ResourceName = tee.SGXEPC
	LabelSGX                              = tee.LabelSGX
)

// categories are the device categories sgxDeviceAlert watches: a node
// with no free device of either is out.
var categories = []corev1.ResourceName{ResourceEnclave, ResourceProvision}

// spec: every SGX resource is requested, enclaves are counted, and the
// nodes served are those with enclave devices or the SGX label.
var spec = devices.Spec{
	Requested:  isSGX,
	Counted:    func(n corev1.ResourceName) bool { return n == ResourceEnclave },
	Serves:     func(n *corev1.Node, capacity int32) bool { return capacity > 0 || n.Labels[LabelSGX] == "true" },
	Categories: categories,
	Noun:       "SGX device",
	NoNodes:    "no selected node has SGX devices or the " + LabelSGX + " label",

	DeviceAlert: health.ReasonSGXDeviceAlert, ReplicaAlert: health.ReasonSGXReplicaAlert,
}

// fields maps the shared numbers onto SGXPlugin's status.
func fields(s *basev1beta1.SGXPluginStatus) devices.Fields {
	return devices.Fields{
		Capacity:         devices.Field{Name: "capacitySGXDevices", Value: &s.CapacitySGXDevices},
		Used:             devices.Field{Name: "usedSGXDevices", Value: &s.UsedSGXDevices},
		Available:        devices.Field{Name: "availableSGXDevices", Value: &s.AvailableSGXDevices},
		CapacityPerNode:  &s.CapacitySGXDevicesPerNode,
		UsedPerNode:      &s.UsedSGXDevicesPerNode,
		AvailablePerNode: &s.AvailableSGXDevicesPerNode,
		Desired:          devices.Field{Name: "desiredReplicas", Value: &s.DesiredReplicas},
		Ready:            devices.Field{Name: "readyReplicas", Value: &s.ReadyReplicas},
		DeviceAlert:      devices.Field{Name: "sgxDeviceAlert", Value: &s.SGXDeviceAlert},
		ReplicaAlert:     devices.Field{Name: "sgxReplicaAlert", Value: &s.SGXReplicaAlert},
	}
}

// Devices computes the SGXPlugin status fields from the nodes the plugin
// serves, the pods in the cluster and the plugin's DaemonSet (nil if it does
// not exist), and judges IsHealthy from the two alerts. Per-node maps list
// the SGX nodes among nodes: those with enclave devices or the SGX label.
func Devices(nodes []corev1.Node, pods []corev1.Pod, ds *appsv1.DaemonSet) (basev1beta1.SGXPluginStatus, health.Observation) {
	var st basev1beta1.SGXPluginStatus
	healthy := devices.Status(spec, fields(&st), nodes, pods, ds)
	st.CapacityEPCBytesPerNode, st.UsedEPCBytesPerNode = epc(nodes, pods)
	return st, healthy
}

// epc is each node's EPC (its capacity of ResourceEPC) and what its
// non-terminated pods requested of it; nodes without EPC are left out.
func epc(nodes []corev1.Node, pods []corev1.Pod) (capacity, used map[string]int64) {
	for i := range nodes {
		q, ok := nodes[i].Status.Capacity[ResourceEPC]
		if !ok || q.Value() <= 0 {
			continue
		}
		if capacity == nil {
			capacity, used = map[string]int64{}, map[string]int64{}
		}
		capacity[nodes[i].Name], used[nodes[i].Name] = q.Value(), 0
	}
	for i := range pods {
		p := &pods[i]
		if _, ok := used[p.Spec.NodeName]; !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// As the scheduler counts a pod: its containers' sum, or its
		// largest init container's, whichever is more.
		var sum, initMax int64
		for _, c := range p.Spec.Containers {
			sum += requestOf(c)
		}
		for _, c := range p.Spec.InitContainers {
			initMax = max(initMax, requestOf(c))
		}
		used[p.Spec.NodeName] += max(sum, initMax)
	}
	return capacity, used
}

// epcDRA is, under DRA, each selected node's EPC as its SGX driver
// publishes it (the enclave device's capacity) and what the claims
// allocated of it consumed.
func epcDRA(nodes []corev1.Node, sliceList []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim) (capacity, used map[string]int64) {
	selected := map[string]bool{}
	for i := range nodes {
		selected[nodes[i].Name] = true
	}
	for _, s := range sliceList {
		if s.Spec.Driver != tee.SGXDRADriver || s.Spec.NodeName == nil || !selected[*s.Spec.NodeName] {
			continue
		}
		for _, d := range s.Spec.Devices {
			if q, ok := d.Capacity[sgxmode.CapacityEPC]; ok && d.Name == sgxmode.DeviceEnclave {
				if capacity == nil {
					capacity, used = map[string]int64{}, map[string]int64{}
				}
				capacity[*s.Spec.NodeName], used[*s.Spec.NodeName] = q.Value.Value(), 0
			}
		}
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if _, ok := used[r.Pool]; ok && r.Driver == tee.SGXDRADriver && r.Device == sgxmode.DeviceEnclave {
				q := r.ConsumedCapacity[sgxmode.CapacityEPC]
				used[r.Pool] += q.Value()
			}
		}
	}
	return capacity, used
}

// requestOf is a container's EPC request (its limit when it sets none:
// extended resources are requested as their limits).
func requestOf(c corev1.Container) int64 {
	if q, ok := c.Resources.Requests[ResourceEPC]; ok {
		return q.Value()
	}
	if q, ok := c.Resources.Limits[ResourceEPC]; ok {
		return q.Value()
	}
	return 0
}

func isSGX(name corev1.ResourceName) bool { return slices.Contains(categories, name) }

// RequestsSGX reports whether a pod asks for any SGX device.
func RequestsSGX(p *corev1.Pod) bool { return devices.RequestsAny(p, isSGX) }
