package sgxplugin

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

// The resources the SGX device plugin registers.
const (
	ResourceEnclave   corev1.ResourceName = "sgx.cloister.dev/enclave"
	ResourceProvision corev1.ResourceName = "sgx.cloister.dev/provision"
	// LabelSGX marks nodes where the plugin found SGX.
	LabelSGX = "cloister.dev/sgx"
)

// categories are the device categories of seed 000's sgxDeviceAlert.
var categories = []corev1.ResourceName{ResourceEnclave, ResourceProvision}

// Devices computes the SGXPlugin status fields from the nodes the plugin
// serves, the pods in the cluster and the plugin's DaemonSet (nil if it does
// not exist), and judges IsHealthy from the two alerts. Per-node maps list
// the SGX nodes among nodes: those with enclave devices or the SGX label.
func Devices(nodes []corev1.Node, pods []corev1.Pod, ds *appsv1.DaemonSet) (basev1beta1.SGXPluginStatus, health.Observation) {
	var st basev1beta1.SGXPluginStatus
	used := service.UsedPerNode(pods, isSGX)
	st.CapacitySGXDevicesPerNode = map[string]int32{}
	st.UsedSGXDevicesPerNode = map[string]int32{}
	st.AvailableSGXDevicesPerNode = map[string]int32{}
	var empty []string
	for i := range nodes {
		n := &nodes[i]
		capacity := service.Quantity(n.Status.Allocatable, ResourceEnclave)
		if capacity == 0 && n.Labels[LabelSGX] != "true" {
			continue
		}
		u := used[n.Name][ResourceEnclave]
		st.CapacitySGXDevicesPerNode[n.Name] = capacity
		st.UsedSGXDevicesPerNode[n.Name] = u
		st.AvailableSGXDevicesPerNode[n.Name] = max(capacity-u, 0)
		st.CapacitySGXDevices += capacity
		st.UsedSGXDevices += u
		st.AvailableSGXDevices += max(capacity-u, 0)
		for _, cat := range categories {
			if service.Quantity(n.Status.Allocatable, cat)-used[n.Name][cat] <= 0 {
				empty = append(empty, fmt.Sprintf("%s (%s)", n.Name, cat))
				st.SGXDeviceAlert++
				break
			}
		}
	}

	if ds == nil {
		st.DesiredReplicas, st.ReadyReplicas, st.SGXReplicaAlert = -1, -1, -1
		return st, health.Obs(health.Unknown, "PluginNotDeployed", "the plugin's DaemonSet does not exist yet")
	}
	st.DesiredReplicas = ds.Status.DesiredNumberScheduled
	st.ReadyReplicas = ds.Status.NumberReady
	st.SGXReplicaAlert = max(st.DesiredReplicas-st.ReadyReplicas, 0)

	var problems []string
	if st.SGXReplicaAlert > 0 {
		problems = append(problems, fmt.Sprintf("sgxReplicaAlert=%d: the plugin is not ready on %d of %d nodes",
			st.SGXReplicaAlert, st.SGXReplicaAlert, st.DesiredReplicas))
	}
	if st.SGXDeviceAlert > 0 {
		problems = append(problems, fmt.Sprintf("sgxDeviceAlert=%d: no free SGX device on %s",
			st.SGXDeviceAlert, strings.Join(empty, ", ")))
	}
	switch {
	case st.SGXDeviceAlert > 0:
		return st, health.Obs(health.False, "SGXDeviceAlert", strings.Join(problems, "; "))
	case st.SGXReplicaAlert > 0:
		return st, health.Obs(health.False, "SGXReplicaAlert", strings.Join(problems, "; "))
	default:
		return st, health.Obs(health.True, "NoAlerts", fmt.Sprintf("%d SGX devices available on %d nodes",
			st.AvailableSGXDevices, len(st.CapacitySGXDevicesPerNode)))
	}
}

func isSGX(name corev1.ResourceName) bool { return slices.Contains(categories, name) }

// RequestsSGX reports whether a pod asks for any SGX device.
func RequestsSGX(p *corev1.Pod) bool { return service.RequestsAny(p, isSGX) }
