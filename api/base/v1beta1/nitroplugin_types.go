package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// NitroPluginSpec configures the AWS Nitro Enclaves device plugin
// DaemonSet: Cloister's, in its nitro mode, which labels each node
// cloister.dev/nitro=true while /dev/nitro_enclaves exists.
type NitroPluginSpec struct {
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

	// Enclaves is how many enclaves a node offers as
	// aws.ec2.nitro/nitro_enclaves (Nitro runs at most 4 per instance).
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4
	Enclaves int32 `json:"enclaves,omitempty"`

	// EnclaveCPUs also offers the CPUs the host took offline for enclaves
	// (nitro-enclaves-allocator) as aws.ec2.nitro/nitro_enclaves_cpus.
	// +optional
	EnclaveCPUs bool `json:"enclaveCPUs,omitempty"`

	// Namespace is where the plugin's DaemonSet runs; unset means the
	// operator's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// NitroPluginStatus reports the plugin and the enclaves of its nodes, like
// SGXPluginStatus. Counts are -1 when they cannot be determined.
type NitroPluginStatus struct {
	common.ServiceStatus `json:",inline"`

	// +optional
	AvailableDevices int32 `json:"availableDevices"`
	// +optional
	AvailableDevicesPerNode map[string]int32 `json:"availableDevicesPerNode,omitempty"`
	// +optional
	CapacityDevices int32 `json:"capacityDevices"`
	// +optional
	CapacityDevicesPerNode map[string]int32 `json:"capacityDevicesPerNode,omitempty"`
	// +optional
	UsedDevices int32 `json:"usedDevices"`
	// +optional
	UsedDevicesPerNode map[string]int32 `json:"usedDevicesPerNode,omitempty"`
	// CapacityCPUs are the enclave CPUs the nodes offer
	// (aws.ec2.nitro/nitro_enclaves_cpus), with spec.enclaveCPUs.
	// +optional
	CapacityCPUs int32 `json:"capacityCPUs"`
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// NitroDeviceAlert counts Nitro nodes without a free enclave: 0 is
	// desired, >0 or -1 alert.
	// +optional
	NitroDeviceAlert int32 `json:"nitroDeviceAlert"`
	// NitroReplicaAlert counts nodes where the plugin should but does not
	// run.
	// +optional
	NitroReplicaAlert int32 `json:"nitroReplicaAlert"`
	// AWSPluginNodes are the selected nodes where AWS's Nitro Enclaves
	// device plugin runs. It registers the same resource, and the kubelet
	// keeps only the last plugin to register, so this plugin stays off
	// them (IsHealthy says NitroAWSPluginConflict until one of the two
	// leaves).
	// +optional
	AWSPluginNodes []string `json:"awsPluginNodes,omitempty"`
}

// NitroPlugin runs Cloister's AWS Nitro Enclaves device plugin on the
// selected nodes. Cluster-scoped, like SGXPlugin.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nitro,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Enclaves",type=integer,JSONPath=`.status.capacityDevices`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NitroPlugin struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NitroPluginSpec   `json:"spec,omitempty"`
	Status NitroPluginStatus `json:"status,omitempty"`
}

// NitroPluginList is a list of NitroPlugins.
// +kubebuilder:object:root=true
type NitroPluginList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NitroPlugin `json:"items"`
}

func init() {
	register(&NitroPlugin{}, &NitroPluginList{})
}
