package nitroplugin

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// AWSPluginImage is the repository name of AWS's Nitro Enclaves device
// plugin (public.ecr.aws/aws-nitro-enclaves/aws-nitro-enclaves-k8s-device-plugin).
const AWSPluginImage = "aws-nitro-enclaves-k8s-device-plugin"

// requested: enclaves and enclave CPUs.
func requested(n corev1.ResourceName) bool { return n == tee.NitroEnclaves || n == tee.NitroCPUs }

// specOf: enclaves are counted on the selected nodes that offer them, but
// those where AWS's plugin runs (its devices, not ours).
func specOf(awsNodes []string) devices.Spec {
	return devices.Spec{
		Requested: requested,
		Counted:   func(n corev1.ResourceName) bool { return n == tee.NitroEnclaves },
		Serves: func(n *corev1.Node, capacity int32) bool {
			return (capacity > 0 || n.Labels[tee.LabelNitro] == "true") && !slices.Contains(awsNodes, n.Name)
		},
		Noun:        "Nitro enclave",
		NoNodes:     "no selected node has /dev/nitro_enclaves",
		DeviceAlert: health.ReasonNitroDeviceAlert, ReplicaAlert: health.ReasonNitroReplicaAlert,
	}
}

// fields maps the shared numbers onto NitroPlugin's status.
func fields(s *basev1beta1.NitroPluginStatus) devices.Fields {
	return devices.Fields{
		Capacity:         devices.Field{Name: "capacityDevices", Value: &s.CapacityDevices},
		Used:             devices.Field{Name: "usedDevices", Value: &s.UsedDevices},
		Available:        devices.Field{Name: "availableDevices", Value: &s.AvailableDevices},
		CapacityPerNode:  &s.CapacityDevicesPerNode,
		UsedPerNode:      &s.UsedDevicesPerNode,
		AvailablePerNode: &s.AvailableDevicesPerNode,
		Desired:          devices.Field{Name: "desiredReplicas", Value: &s.DesiredReplicas},
		Ready:            devices.Field{Name: "readyReplicas", Value: &s.ReadyReplicas},
		DeviceAlert:      devices.Field{Name: "nitroDeviceAlert", Value: &s.NitroDeviceAlert},
		ReplicaAlert:     devices.Field{Name: "nitroReplicaAlert", Value: &s.NitroReplicaAlert},
	}
}

// IsAWSPlugin says whether a pod runs AWS's Nitro Enclaves device plugin.
func IsAWSPlugin(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		repo := c.Image
		if at := strings.IndexByte(repo, '@'); at >= 0 {
			repo = repo[:at]
		}
		if colon := strings.LastIndexByte(repo, ':'); colon > strings.LastIndexByte(repo, '/') {
			repo = repo[:colon]
		}
		if repo == AWSPluginImage || strings.HasSuffix(repo, "/"+AWSPluginImage) {
			return true
		}
	}
	return false
}

// AWSPluginNodes are the selected nodes where a live pod of AWS's plugin
// is bound, sorted.
func AWSPluginNodes(nodes []corev1.Node, pods []corev1.Pod) []string {
	var out []string
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !IsAWSPlugin(p) {
			continue
		}
		if slices.ContainsFunc(nodes, func(n corev1.Node) bool { return n.Name == p.Spec.NodeName }) && !slices.Contains(out, p.Spec.NodeName) {
			out = append(out, p.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out
}

// Devices computes the NitroPlugin status from the selected nodes, the
// pods and the plugin's DaemonSet (nil if it does not exist). Nodes of
// AWS's plugin are left out of the counts and make it unhealthy.
func Devices(nodes []corev1.Node, pods []corev1.Pod, ds *appsv1.DaemonSet) (basev1beta1.NitroPluginStatus, health.Observation) {
	var st basev1beta1.NitroPluginStatus
	st.AWSPluginNodes = AWSPluginNodes(nodes, pods)
	spec := specOf(st.AWSPluginNodes)
	obs := devices.Status(spec, fields(&st), nodes, pods, ds)
	for i := range nodes {
		if _, ok := st.CapacityDevicesPerNode[nodes[i].Name]; ok {
			st.CapacityCPUs += devices.Quantity(nodes[i].Status.Allocatable, tee.NitroCPUs)
		}
	}
	if len(st.AWSPluginNodes) > 0 && obs.Status != health.Unknown {
		return st, health.Obs(health.False, health.ReasonNitroAWSPluginConflict, fmt.Sprintf(
			"AWS's Nitro Enclaves device plugin runs on %s: it registers %s too, and the kubelet keeps only the last plugin to register, so this plugin stays off those nodes; "+
				"run one of the two there (remove AWS's DaemonSet from them, or leave them out of spec.nodeSelector)",
			strings.Join(st.AWSPluginNodes, ", "), tee.NitroEnclaves))
	}
	return st, obs
}
