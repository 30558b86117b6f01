package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// LASSpec configures the local attestation service, a DaemonSet on SGX
// nodes that quotes enclaves for remote attestation.
type LASSpec struct {
	common.ServiceSpec `json:",inline"`

	// HostPort is where LAS listens on every node: enclaves reach the LAS of
	// their own node at status.hostIP:HostPort, which no Service can route.
	// +optional
	// +kubebuilder:default=18766
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HostPort int32 `json:"hostPort,omitempty"`

	// Namespace is where the LAS DaemonSet runs; unset means the operator's
	// namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// Simulation makes LAS issue simulated evidence, signed by a key of its
	// own, where no SGX quoting is possible. Insecure, for development
	// only: only a CAS that runs with simulation accepts such evidence.
	// +optional
	Simulation bool `json:"simulation,omitempty"`
}

// LASNode is the LAS pod of one node.
type LASNode struct {
	// Pod is the name of the LAS pod on the node.
	Pod string `json:"pod"`
	// Ready says whether the pod passes its readiness probe, which checks
	// that the SGX device can be opened.
	Ready bool `json:"ready"`
	// Version is the LAS version the pod runs.
	// +optional
	Version string `json:"version,omitempty"`
	// SimulationKey, in simulation, is the PEM public key the pod signs
	// simulated evidence with, read from the pod by the operator and
	// published to the simulated CASes, which take simulated workload
	// evidence from these keys only.
	// +optional
	SimulationKey string `json:"simulationKey,omitempty"`
}

// LASStatus reports the LAS pods. Counts are -1 when they cannot be
// determined.
type LASStatus struct {
	common.ServiceStatus `json:",inline"`

	// DesiredNumberScheduled is the number of nodes that should run LAS.
	// +optional
	DesiredNumberScheduled int32 `json:"desiredNumberScheduled"`
	// Nodes describes the LAS pod of every node that should run one.
	// +optional
	Nodes map[string]LASNode `json:"nodes,omitempty"`
	// NumberAvailable is the number of nodes with a ready LAS pod.
	// +optional
	NumberAvailable int32 `json:"numberAvailable"`
	// Version is the LAS version observed in the pods.
	// +optional
	Version string `json:"version,omitempty"`
	// LASReplicaAlert counts nodes where LAS should but does not run ready:
	// 0 is desired, >0 alerts.
	// +optional
	LASReplicaAlert int32 `json:"lasReplicaAlert"`
}

// LAS runs the local attestation service on every SGX node. It is
// cluster-scoped like SGXPlugin: it serves nodes, and its DaemonSet lives
// in spec.namespace.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,path=las,singular=las,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredNumberScheduled`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.numberAvailable`
// +kubebuilder:printcolumn:name="Simulation",type=boolean,JSONPath=`.spec.simulation`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LAS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LASSpec   `json:"spec,omitempty"`
	Status LASStatus `json:"status,omitempty"`
}

// LASList is a list of LAS.
// +kubebuilder:object:root=true
type LASList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LAS `json:"items"`
}

func init() {
	register(&LAS{}, &LASList{})
}
