package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// SGXPluginSpec configures the SGX device plugin DaemonSet, which offers
// the SGX devices of every selected node to pods.
type SGXPluginSpec struct {
	common.ServiceSpec `json:",inline"`

	// Mode says how the devices are offered: DevicePlugin (extended
	// resources in limits), DRA (the family's DRA driver: ResourceClaims,
	// and limits through its DeviceClass's extended resource), or Both
	// during a migration, where the DRA driver owns the devices and the
	// device plugin registers none, cleaning up after the pods that held
	// some through it.
	// +optional
	// +kubebuilder:default=DevicePlugin
	Mode common.DeviceMode `json:"mode,omitempty"`

	// CapacitySGXPods is the maximum number of SGX devices to use per node.
	// Unset means the node's maximum number of pods.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	CapacitySGXPods *int32 `json:"capacitySGXPods,omitempty"`

	// Namespace is where the plugin's DaemonSet runs; unset means the
	// operator's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// SGXPluginStatus reports the plugin and the SGX devices of the nodes it
// runs on. Counts are -1 when they cannot be determined.
type SGXPluginStatus struct {
	common.ServiceStatus `json:",inline"`

	// AvailableSGXDevices are allocatable but not used.
	// +optional
	AvailableSGXDevices int32 `json:"availableSGXDevices"`
	// AvailableSGXDevicesPerNode are allocatable but not used, per node.
	// +optional
	AvailableSGXDevicesPerNode map[string]int32 `json:"availableSGXDevicesPerNode,omitempty"`
	// CapacitySGXDevices is how many SGX devices pods can allocate in total.
	// +optional
	CapacitySGXDevices int32 `json:"capacitySGXDevices"`
	// CapacitySGXDevicesPerNode is how many SGX devices pods can allocate, per node.
	// +optional
	CapacitySGXDevicesPerNode map[string]int32 `json:"capacitySGXDevicesPerNode,omitempty"`
	// UsedSGXDevices is the number of SGX devices non-terminated pods requested.
	// +optional
	UsedSGXDevices int32 `json:"usedSGXDevices"`
	// UsedSGXDevicesPerNode is UsedSGXDevices per node.
	// +optional
	UsedSGXDevicesPerNode map[string]int32 `json:"usedSGXDevicesPerNode,omitempty"`
	// DesiredReplicas is the number of nodes the plugin should run on.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// ReadyReplicas is the number of nodes with a ready plugin pod.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// SGXDeviceAlert counts plugin nodes without an available device in
	// one or more device categories: 0 is desired, >0 or -1 alert.
	// +optional
	SGXDeviceAlert int32 `json:"sgxDeviceAlert"`
	// SGXReplicaAlert counts nodes where the plugin should but does not run:
	// 0 is desired, >0 or -1 alert.
	// +optional
	SGXReplicaAlert int32 `json:"sgxReplicaAlert"`
	// CapacityEPCBytesPerNode is each SGX node's enclave page cache in
	// bytes (its sgx.cloister.dev/epc), where the plugin found one.
	// +optional
	CapacityEPCBytesPerNode map[string]int64 `json:"capacityEPCBytesPerNode,omitempty"`
	// UsedEPCBytesPerNode is the EPC its non-terminated pods requested,
	// per node.
	// +optional
	UsedEPCBytesPerNode map[string]int64 `json:"usedEPCBytesPerNode,omitempty"`
}

// SGXPlugin runs Cloister's SGX device plugin on every selected node, which
// labels SGX-capable nodes and lets pods request sgx.cloister.dev/enclave and
// sgx.cloister.dev/provision. It is cluster-scoped: it serves nodes, and
// its DaemonSet lives in spec.namespace, which a namespaced owner could not
// own.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=sgx,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableSGXDevices`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SGXPlugin struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SGXPluginSpec   `json:"spec,omitempty"`
	Status SGXPluginStatus `json:"status,omitempty"`
}

// SGXPluginList is a list of SGXPlugins.
// +kubebuilder:object:root=true
type SGXPluginList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SGXPlugin `json:"items"`
}

func init() {
	register(&SGXPlugin{}, &SGXPluginList{})
}
