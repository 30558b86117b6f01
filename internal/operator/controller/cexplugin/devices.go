package cexplugin

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// ArchS390X is the only architecture with CryptoExpress adapters; the
// plugin runs on such nodes only.
const ArchS390X = tee.ArchS390X

// Resources returns whether a resource belongs to cexType: ibm.com/cex-<t>
// or a config set's ibm.com/cex-<t>-<set>.
func Resources(t basev1beta1.CEXType) func(corev1.ResourceName) bool {
	base := tee.CEXResource(string(t), "")
	return func(name corev1.ResourceName) bool {
		return string(name) == base || strings.HasPrefix(string(name), base+"-")
	}
}

// specOf: the type's resources (plain and config sets) are requested and
// counted, on the selected s390x nodes; a node is out when none is free.
func specOf(t basev1beta1.CEXType) devices.Spec {
	match := Resources(t)
	return devices.Spec{
		Requested: match,
		Counted:   match,
		Serves:    func(n *corev1.Node, _ int32) bool { return n.Labels[corev1.LabelArchStable] == ArchS390X },
		Noun:      tee.CEXResource(string(t), "") + " device",
		NoNodes:   "no selected s390x node",

		DeviceAlert: health.ReasonCEXDeviceAlert, ReplicaAlert: health.ReasonCEXReplicaAlert,
	}
}

// fields maps the shared numbers onto CEXPlugin's status.
func fields(s *basev1beta1.CEXPluginStatus) devices.Fields {
	return devices.Fields{
		Capacity:         devices.Field{Name: "capacityDevices", Value: &s.CapacityDevices},
		Used:             devices.Field{Name: "usedDevices", Value: &s.UsedDevices},
		Available:        devices.Field{Name: "availableDevices", Value: &s.AvailableDevices},
		CapacityPerNode:  &s.CapacityDevicesPerNode,
		UsedPerNode:      &s.UsedDevicesPerNode,
		AvailablePerNode: &s.AvailableDevicesPerNode,
		Desired:          devices.Field{Name: "desiredReplicas", Value: &s.DesiredReplicas},
		Ready:            devices.Field{Name: "readyReplicas", Value: &s.ReadyReplicas},
		DeviceAlert:      devices.Field{Name: "cexDeviceAlert", Value: &s.CEXDeviceAlert},
		ReplicaAlert:     devices.Field{Name: "cexReplicaAlert", Value: &s.CEXReplicaAlert},
	}
}

// Devices computes the CEXPlugin status from the nodes the plugin serves
// (the selected s390x nodes), the pods and the plugin's DaemonSet (nil if
// it does not exist). A device is one APQN slot (an APQN times overcommit).
func Devices(t basev1beta1.CEXType, nodes []corev1.Node, pods []corev1.Pod, ds *appsv1.DaemonSet) (basev1beta1.CEXPluginStatus, health.Observation) {
	var st basev1beta1.CEXPluginStatus
	healthy := devices.Status(specOf(t), fields(&st), nodes, pods, ds)
	return st, healthy
}

// anyCEX: a CryptoExpress resource of any type.
func anyCEX(n corev1.ResourceName) bool { return strings.HasPrefix(string(n), tee.CEXPrefix) }
