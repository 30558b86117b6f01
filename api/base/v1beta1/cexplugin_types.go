package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// CEXType is the kind of CryptoExpress queue the plugin offers; it names the
// resource ibm.com/cex-<type>.
// +kubebuilder:validation:Enum=ep11;cca;accel
type CEXType string

// CryptoExpress adapter modes: CEX<n>P, CEX<n>C and CEX<n>A cards.
const (
	CEXTypeEP11  CEXType = "ep11"
	CEXTypeCCA   CEXType = "cca"
	CEXTypeAccel CEXType = "accel"
)

// APQN is one adjunct processor queue: an adapter (card) and a domain.
type APQN struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	Adapter int32 `json:"adapter"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	Domain int32 `json:"domain"`
}

// CryptoConfigSet is a named group of APQNs that pods of one project share.
// Each set is offered as its own resource, ibm.com/cex-<cexType>-<name>.
type CryptoConfigSet struct {
	// Name is part of the resource name, which must stay within 63
	// characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// APQNs of the set; an APQN belongs to one set at most.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	APQNs []APQN `json:"apqns"`
	// MachineID limits the set to the IBM Z machine with this
	// <manufacturer>-<type>-<sequence code> (from /proc/sysinfo).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MachineID string `json:"machineID,omitempty"`
	// Namespaces may claim the set's APQNs under DRA (its DeviceClass
	// cex-set-<name>.cloister.dev); a claim from any other namespace is
	// refused at admission. Empty: every namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`
}

// CEXPluginSpec configures the IBM CryptoExpress device plugin DaemonSet.
// +kubebuilder:validation:XValidation:rule="!has(self.configSets) || self.configSets.all(s, self.configSets.exists_one(t, t.name == s.name))",message="configSets names must be unique"
type CEXPluginSpec struct {
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

	// CEXType selects the queues offered as ibm.com/cex-<type>.
	// +optional
	// +kubebuilder:default=ep11
	CEXType CEXType `json:"cexType,omitempty"`

	// Overcommit is how many containers may share one APQN.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Overcommit int32 `json:"overcommit,omitempty"`

	// ConfigSets offer named groups of APQNs, each as its own resource
	// ibm.com/cex-<cexType>-<name>; without them every APQN of CEXType is
	// offered as ibm.com/cex-<cexType>. The plugin also refuses an APQN
	// listed in two sets.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ConfigSets []CryptoConfigSet `json:"configSets,omitempty"`

	// Namespace is where the plugin's DaemonSet runs; unset means the
	// operator's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// CEXPluginStatus reports the plugin and the CryptoExpress devices of its
// nodes, like SGXPluginStatus. Counts are -1 when they cannot be determined.
type CEXPluginStatus struct {
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
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// CEXDeviceAlert counts plugin nodes without an available device: 0 is
	// desired, >0 or -1 alert.
	// +optional
	CEXDeviceAlert int32 `json:"cexDeviceAlert"`
	// CEXReplicaAlert counts nodes where the plugin should but does not run.
	// +optional
	CEXReplicaAlert int32 `json:"cexReplicaAlert"`
}

// CEXPlugin runs Cloister's IBM CryptoExpress device plugin on the selected
// nodes. Cluster-scoped, like SGXPlugin.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cex,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.cexType`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CEXPlugin struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CEXPluginSpec   `json:"spec,omitempty"`
	Status CEXPluginStatus `json:"status,omitempty"`
}

// CEXPluginList is a list of CEXPlugins.
// +kubebuilder:object:root=true
type CEXPluginList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CEXPlugin `json:"items"`
}

func init() {
	register(&CEXPlugin{}, &CEXPluginList{})
}
