package cexplugin

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/controller/service"
	"github.com/cloister-cc/cloister/internal/health"
)

// ArchS390X is the only architecture with CryptoExpress adapters; the
// plugin runs on such nodes only.
const ArchS390X = "s390x"

// Resources returns whether a resource belongs to cexType: ibm.com/cex-<t>
// or a config set's ibm.com/cex-<t>-<set>.
func Resources(t basev1beta1.CEXType) func(corev1.ResourceName) bool {
	base := "ibm.com/cex-" + string(t)
	return func(name corev1.ResourceName) bool {
		return string(name) == base || strings.HasPrefix(string(name), base+"-")
	}
}

// Devices computes the CEXPlugin status from the nodes the plugin serves
// (the selected s390x nodes), the pods and the plugin's DaemonSet (nil if
// it does not exist). A device is one APQN slot (an APQN times overcommit).
func Devices(t basev1beta1.CEXType, nodes []corev1.Node, pods []corev1.Pod, ds *appsv1.DaemonSet) (basev1beta1.CEXPluginStatus, health.Observation) {
	match := Resources(t)
	used := service.UsedPerNode(pods, match)
	st := basev1beta1.CEXPluginStatus{
		CapacityDevicesPerNode:  map[string]int32{},
		UsedDevicesPerNode:      map[string]int32{},
		AvailableDevicesPerNode: map[string]int32{},
	}
	var empty []string
	for i := range nodes {
		n := &nodes[i]
		if n.Labels[corev1.LabelArchStable] != ArchS390X {
			continue
		}
		var capacity, u int32
		for name := range n.Status.Allocatable {
			if match(name) {
				capacity += service.Quantity(n.Status.Allocatable, name)
			}
		}
		for _, v := range used[n.Name] {
			u += v
		}
		avail := max(capacity-u, 0)
		st.CapacityDevicesPerNode[n.Name], st.UsedDevicesPerNode[n.Name], st.AvailableDevicesPerNode[n.Name] = capacity, u, avail
		st.CapacityDevices += capacity
		st.UsedDevices += u
		st.AvailableDevices += avail
		if avail == 0 {
			empty = append(empty, n.Name)
			st.CEXDeviceAlert++
		}
	}
	slices.Sort(empty)
	if ds == nil {
		st.DesiredReplicas, st.ReadyReplicas, st.CEXReplicaAlert = -1, -1, -1
		return st, health.Obs(health.Unknown, "PluginNotDeployed", "the plugin's DaemonSet does not exist yet")
	}
	st.DesiredReplicas = ds.Status.DesiredNumberScheduled
	st.ReadyReplicas = ds.Status.NumberReady
	st.CEXReplicaAlert = max(st.DesiredReplicas-st.ReadyReplicas, 0)
	switch {
	case st.CEXDeviceAlert > 0:
		return st, health.Obs(health.False, "CEXDeviceAlert", fmt.Sprintf("cexDeviceAlert=%d: no free ibm.com/cex-%s device on %s",
			st.CEXDeviceAlert, t, strings.Join(empty, ", ")))
	case st.CEXReplicaAlert > 0:
		return st, health.Obs(health.False, "CEXReplicaAlert", fmt.Sprintf("cexReplicaAlert=%d: the plugin is not ready on %d of %d nodes",
			st.CEXReplicaAlert, st.CEXReplicaAlert, st.DesiredReplicas))
	case len(st.CapacityDevicesPerNode) == 0:
		return st, health.Obs(health.True, "NoNodes", "no selected s390x node: nothing to serve")
	default:
		return st, health.Obs(health.True, "NoAlerts", fmt.Sprintf("%d ibm.com/cex-%s devices available on %d nodes",
			st.AvailableDevices, t, len(st.CapacityDevicesPerNode)))
	}
}
