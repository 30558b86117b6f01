package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// EnclaveResources size each Nitro Enclave.
type EnclaveResources struct {
	// CPUs given to the enclave; Nitro Enclaves need at least 2 (one core).
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=128
	CPUs int32 `json:"cpus,omitempty"`
	// MemoryMiB given to the enclave.
	// +optional
	// +kubebuilder:default=2048
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=1048576
	MemoryMiB int32 `json:"memoryMiB,omitempty"`
	// Debug runs the enclave in debug mode: its console is readable and
	// its attestation documents carry zero PCRs. Never for production.
	// +optional
	Debug bool `json:"debug,omitempty"`
	// PCRs are the measurements of the enclave image file the pods'
	// image carries (/enclave/enclave.eif), as `cloister enclave build`
	// printed them (with --update, it writes them here). The supervisor
	// measures the file before booting it and refuses one that measures
	// otherwise. Ignored in simulation.
	// +optional
	PCRs *EnclavePCRs `json:"pcrs,omitempty"`
}

// EnclavePCRs are a Nitro Enclave image's measurements, each the
// lowercase hex of a SHA-384 register, as attestation documents carry
// them: PCR0 the whole image, PCR1 the kernel and boot ramdisk (AWS's
// files), PCR2 the application (the orchestrator and the plugins).
type EnclavePCRs struct {
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{96}$`
	PCR0 string `json:"pcr0"`
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{96}$`
	PCR1 string `json:"pcr1"`
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{96}$`
	PCR2 string `json:"pcr2"`
}

// UserPlugin is a container the orchestrator inside the enclave runs.
// +kubebuilder:validation:XValidation:rule="!has(self.env) || self.env.all(e, !has(e.valueFrom))",message="env: give every variable a literal value; valueFrom reads the cluster, which the enclave cannot reach"
type UserPlugin struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// Command runs the plugin. In simulation the image is not pulled:
	// the command runs from the enclave pod's image.
	// +optional
	Command []string `json:"command,omitempty"`
	// +optional
	Args []string `json:"args,omitempty"`
	// Env are literal variables (the enclave cannot read the cluster).
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`
	// +optional
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
	// RestartPolicy of the container inside the enclave.
	// +optional
	// +kubebuilder:default=Always
	// +kubebuilder:validation:Enum=Always;OnFailure;Never
	RestartPolicy corev1.RestartPolicy `json:"restartPolicy,omitempty"`
}

// NitroEnclaveDeploymentSpec describes enclave pods: pods on Nitro-capable
// nodes that boot a Nitro Enclave and run UserPlugins inside it.
// +kubebuilder:validation:XValidation:rule="self.userPlugins.all(p, self.userPlugins.exists_one(q, q.name == p.name))",message="userPlugins names must be unique"
type NitroEnclaveDeploymentSpec struct {
	common.ServiceSpec `json:",inline"`

	// Replicas is the number of enclave pods.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`
	// +optional
	// +kubebuilder:default={}
	Enclave EnclaveResources `json:"enclave,omitempty"`
	// Simulation runs each enclave as a process of its pod instead of a
	// Nitro Enclave, for development without Nitro hardware. Its
	// attestation is simulated and insecure: no hardware vouches for it.
	// +optional
	Simulation bool `json:"simulation,omitempty"`
	// UserPlugins are the containers of the enclave.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	UserPlugins []UserPlugin `json:"userPlugins"`
	// Egress are the addresses in the cluster the plugins may reach: each
	// a loopback port inside the enclave that the pod relays to its
	// address (an enclave has no network of its own). Use TLS across it:
	// the pod's node relays the bytes.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Egress []EnclaveEgress `json:"egress,omitempty"`
	// ManifestKey is the owner's public key (PEM, ECDSA P-256): the
	// enclave applies a manifest only when signed by it. cloister enclave
	// build puts it into the enclave image (measured into PCR2); a
	// simulated enclave gets it from the pod.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ManifestKey string `json:"manifestKey,omitempty"`
	// ManifestSignature is the owner's signature of the manifest this
	// spec derives (cloister enclave sign): any change of the plugins'
	// commands, arguments, environment or ports needs a new one.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ManifestSignature string `json:"manifestSignature,omitempty"`
}

// EnclaveEgress is one address the enclave's plugins reach through the
// pod.
type EnclaveEgress struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Port is the loopback port inside the enclave the plugins connect to.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Address is HOST:PORT in the cluster (a Service's name, or an IP).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.:\[\]-]+:[0-9]{1,5}$`
	Address string `json:"address"`
}

// DeploymentStatus is SCHEDULED once the enclave pods' Deployment exists, or
// ERROR when it could not be created.
// +kubebuilder:validation:Enum=SCHEDULED;ERROR
type DeploymentStatus string

// The statuses a NitroEnclaveDeployment shows in its STATUS column.
const (
	DeploymentScheduled DeploymentStatus = "SCHEDULED"
	DeploymentError     DeploymentStatus = "ERROR"
)

// NitroEnclaveDeploymentStatus reports the enclave pods.
type NitroEnclaveDeploymentStatus struct {
	common.ServiceStatus `json:",inline"`

	// Status is SCHEDULED or ERROR (the STATUS column).
	// +optional
	Status DeploymentStatus `json:"status,omitempty"`
	// Ready is "<ready>/<desired>" enclave pods (the READY column).
	// +optional
	Ready string `json:"ready,omitempty"`
	// +optional
	Replicas int32 `json:"replicas"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// Selector selects the enclave pods (label selector syntax), for
	// the scale subresource a HorizontalPodAutoscaler reads.
	// +optional
	Selector string `json:"selector,omitempty"`
	// Manifest is the SHA-256 (hex) of the enclave manifest the pods run:
	// the enclave's evidence carries it (PCR16 for the first applied, the
	// next PCR for each later one), so a verifier pins it (an identity's
	// manifest) and sees any change of a command, argument or environment
	// variable the host makes.
	// +optional
	Manifest string `json:"manifest,omitempty"`
	// PCRs are what a verifier pins the enclaves by (a nitro identity's
	// pcrs): spec.enclave.pcrs once a pod booted an image file that
	// measures so (the supervisor refuses any other); in simulation, the
	// simulated evidence's, derived from the manifest.
	// +optional
	PCRs *EnclavePCRs `json:"pcrs,omitempty"`
}

// NitroEnclaveDeployment runs enclave pods on AWS Nitro nodes.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ned,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.status`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`,priority=1
// +kubebuilder:printcolumn:name="PCR0",type=string,JSONPath=`.status.pcrs.pcr0`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NitroEnclaveDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NitroEnclaveDeploymentSpec   `json:"spec"`
	Status NitroEnclaveDeploymentStatus `json:"status,omitempty"`
}

// NitroEnclaveDeploymentList is a list of NitroEnclaveDeployments.
// +kubebuilder:object:root=true
type NitroEnclaveDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NitroEnclaveDeployment `json:"items"`
}

func init() {
	register(&NitroEnclaveDeployment{}, &NitroEnclaveDeploymentList{})
}
