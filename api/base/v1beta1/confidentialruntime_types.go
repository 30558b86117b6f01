package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// ConfidentialRuntimeSpec says which confidential runtime to install on
// which nodes. The service fields configure the node installer: its image,
// and in nodeSelector the nodes to install on.
// +kubebuilder:validation:XValidation:rule="self.platform == oldSelf.platform",message="platform cannot change: create another ConfidentialRuntime (both can be installed at once) and delete this one"
type ConfidentialRuntimeSpec struct {
	common.ServiceSpec `json:",inline"`

	// Platform is where the pods run: sim (runc underneath, evidence from
	// LAS; insecure, for development only), snp (Kata on AMD SEV-SNP) or
	// tdx (Kata on Intel TDX; both need Kata installed under /opt/kata).
	// +kubebuilder:validation:Enum=sim;snp;tdx
	Platform string `json:"platform"`

	// Overhead is what the RuntimeClass adds to every pod's requests
	// (overhead.podFixed): the confidential VM's own memory and CPU.
	// +optional
	// +kubebuilder:default={memory:"256Mi"}
	Overhead corev1.ResourceList `json:"overhead,omitempty"`

	// ContainerdConfig is containerd's configuration file on the nodes;
	// the handler goes into conf.d/ beside it, which it imports.
	// +optional
	// +kubebuilder:default="/etc/containerd/config.toml"
	// +kubebuilder:validation:Pattern=`^/.*\.toml$`
	ContainerdConfig string `json:"containerdConfig,omitempty"`

	// ContainerdSocket is containerd's gRPC socket on the nodes (its
	// configuration's grpc.address), where the installer asks containerd
	// whether it serves the handler.
	// +optional
	// +kubebuilder:default="/run/containerd/containerd.sock"
	// +kubebuilder:validation:Pattern=`^/.+$`
	ContainerdSocket string `json:"containerdSocket,omitempty"`

	// Namespace is where the node installer's DaemonSet runs; unset means
	// the operator's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// RuntimeNodeState says how far a node is.
// +kubebuilder:validation:Enum=Installing;Installed;Failed;Removing
type RuntimeNodeState string

// The states of a node.
const (
	RuntimeNodeInstalling RuntimeNodeState = "Installing"
	RuntimeNodeInstalled  RuntimeNodeState = "Installed"
	RuntimeNodeFailed     RuntimeNodeState = "Failed"
	RuntimeNodeRemoving   RuntimeNodeState = "Removing"
)

// RuntimeNode is the runtime on one node.
type RuntimeNode struct {
	// State is Installed once containerd serves the handler and the node
	// carries the RuntimeClass's label; Failed with the reason in Message.
	State RuntimeNodeState `json:"state"`
	// Message says why a node failed, as its installer reported it.
	// +optional
	Message string `json:"message,omitempty"`
	// Pod is the node installer's pod on the node.
	Pod string `json:"pod"`
}

// ConfidentialRuntimeStatus reports the RuntimeClass and every node.
type ConfidentialRuntimeStatus struct {
	common.ServiceStatus `json:",inline"`

	// RuntimeClassName is the RuntimeClass (and containerd handler) pods
	// name to run confidentially; cloister generate writes it. It carries
	// the platform and a hash of the Cloister version, so two versions can
	// be installed side by side.
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// DesiredNumberScheduled is the number of nodes to install on, -1 when
	// unknown.
	// +optional
	DesiredNumberScheduled int32 `json:"desiredNumberScheduled"`
	// NumberInstalled is the number of nodes with the handler installed.
	// +optional
	NumberInstalled int32 `json:"numberInstalled"`
	// Nodes is the state of every node to install on.
	// +optional
	Nodes map[string]RuntimeNode `json:"nodes,omitempty"`
	// RuntimeInstallAlert counts nodes where the handler should but is not
	// installed: 0 is desired, >0 alerts.
	// +optional
	RuntimeInstallAlert int32 `json:"runtimeInstallAlert"`
}

// ConfidentialRuntime installs a confidential container runtime: a
// RuntimeClass, and on every selected node its containerd handler (by a
// node installer DaemonSet, which labels the nodes it installed on; the
// RuntimeClass schedules pods only there). Deleting it takes the handler
// out of the nodes again.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ccr,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Platform",type=string,JSONPath=`.spec.platform`
// +kubebuilder:printcolumn:name="RuntimeClass",type=string,JSONPath=`.status.runtimeClassName`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredNumberScheduled`
// +kubebuilder:printcolumn:name="Installed",type=integer,JSONPath=`.status.numberInstalled`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConfidentialRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfidentialRuntimeSpec   `json:"spec,omitempty"`
	Status ConfidentialRuntimeStatus `json:"status,omitempty"`
}

// ConfidentialRuntimeList is a list of ConfidentialRuntime.
// +kubebuilder:object:root=true
type ConfidentialRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfidentialRuntime `json:"items"`
}

func init() {
	register(&ConfidentialRuntime{}, &ConfidentialRuntimeList{})
}
