package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// DefaultVaultPort is the port Vault's API listens on unless
// spec.service says otherwise; the raft cluster port is the next one.
const DefaultVaultPort = 8200

// VaultCAS names the CAS a Vault attests to, in the Vault's namespace:
// its pods get their certificates, their configuration and the seal's
// transit key from it.
type VaultCAS struct {
	// Name of the CAS resource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// VaultPolicy is the CAS policy the Vault's pods attest under. The
// operator writes it out for its owners to sign (it never signs one);
// a SignedPolicy or EncryptedPolicy of the owners' signature registers it.
type VaultPolicy struct {
	// Name of the policy in CAS; empty means the Vault's name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
	// Owners are the PEM public keys (P-256) that sign the policy and
	// every change of it, a majority of them each change; Vault's
	// recovery keys are sealed to them, one share each.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	Owners []string `json:"owners"`
}

// VaultStorage is the raft storage of each replica, on a claim of its own.
type VaultStorage struct {
	// StorageClass of the claims; unset uses the default class.
	// +optional
	StorageClass *string `json:"storageClass,omitempty"`
	// +optional
	// +kubebuilder:default="1Gi"
	Size *resource.Quantity `json:"size,omitempty"`
}

// VaultService is how Vault is exposed to its clients.
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancerIP) || self.type == 'LoadBalancer'",message="service.loadBalancerIP needs service.type LoadBalancer"
type VaultService struct {
	// +optional
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;LoadBalancer;NodePort
	Type corev1.ServiceType `json:"type,omitempty"`
	// Port is Vault's API port, on the pods and the Service; the raft
	// cluster port is the next one, between the pods only.
	// +optional
	// +kubebuilder:default=8200
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65534
	Port int32 `json:"port,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=45
	LoadBalancerIP string `json:"loadBalancerIP,omitempty"`
	// Annotations are added to the Vault Service.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`
}

// VaultSpec is a Vault (or OpenBao) cluster in confidential pods: raft
// storage on claims, its TLS certificates and configuration from CAS,
// unsealed by CAS's transit endpoint after every restart.
// +kubebuilder:validation:XValidation:rule="has(self.image) && self.image.matches('^[^@ ]+@sha256:[0-9a-f]{64}$')",message="image: name the Vault (or OpenBao) server image pinned by digest (REPOSITORY@sha256:...): the pods' policy, which the owners sign, pins it"
// +kubebuilder:validation:XValidation:rule="!has(self.autoUpdate) || !self.autoUpdate",message="autoUpdate: a new image is a new pod policy, which the owners sign; name the new image in spec.image"
type VaultSpec struct {
	common.ServiceSpec `json:",inline"`

	// CAS the pods attest to.
	CAS VaultCAS `json:"cas"`

	// RuntimeClassName is the confidential runtime the pods run in: a
	// ConfidentialRuntime's status.runtimeClassName (its platform sim on
	// the dev cluster, which is insecure).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	RuntimeClassName string `json:"runtimeClassName"`

	// Policy the pods attest under.
	Policy VaultPolicy `json:"policy"`

	// Replicas of Vault, members of one raft cluster: 3 ride out the loss
	// of one, 5 of two.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	Replicas int32 `json:"replicas,omitempty"`

	// Storage cannot change once Vault runs: its data stays on the claims
	// it has.
	// +optional
	// +kubebuilder:default={}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storage cannot change on an existing Vault: its raft data stays on the claims it has; take a raft snapshot, make a new Vault and restore it there"
	Storage VaultStorage `json:"storage,omitempty"`

	// +optional
	// +kubebuilder:default={}
	Service VaultService `json:"service,omitempty"`
}

// VaultStatus reports a Vault.
type VaultStatus struct {
	common.ServiceStatus `json:",inline"`

	// Version is Vault's version as its replicas report it.
	// +optional
	Version string `json:"version,omitempty"`

	// Policy is the CAS policy the pods attest under, unsigned: the
	// ConfigMap PolicyConfigMap holds it for its owners to read and sign
	// (cloister policy sign), and PolicyDigest is its SHA-256.
	// +optional
	Policy string `json:"policy,omitempty"`
	// +optional
	PolicyConfigMap string `json:"policyConfigMap,omitempty"`
	// +optional
	PolicyDigest string `json:"policyDigest,omitempty"`

	// Replicas is how many pods spec.replicas asks for.
	// +optional
	Replicas int32 `json:"replicas"`
	// ReadyReplicas are initialised, unsealed and in the raft quorum.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// SealedReplicas answer but are sealed (or not initialised).
	// +optional
	SealedReplicas int32 `json:"sealedReplicas"`
	// VaultSealedAlert counts the replicas spec.replicas asks for that do
	// not serve unsealed: 0 is desired, >0 alerts.
	// +optional
	VaultSealedAlert int32 `json:"vaultSealedAlert"`

	// Leader is the replica raft elected, as the replicas agree.
	// +optional
	Leader string `json:"leader,omitempty"`

	// InitializedAt is when the operator first saw Vault initialised.
	// +optional
	InitializedAt *metav1.Time `json:"initializedAt,omitempty"`

	// RecoveryKeysSecret names the Secret holding Vault's recovery keys,
	// each sealed (HPKE) to one of spec.policy.owners: the only copy, and
	// only ciphertext.
	// +optional
	RecoveryKeysSecret string `json:"recoveryKeysSecret,omitempty"`
}

// Vault runs HashiCorp Vault or OpenBao in confidential pods, unsealed by
// CAS after they attest.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=vlt,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Sealed",type=integer,JSONPath=`.status.sealedReplicas`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Vault struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VaultSpec   `json:"spec,omitempty"`
	Status VaultStatus `json:"status,omitempty"`
}

// VaultList is a list of Vault.
// +kubebuilder:object:root=true
type VaultList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Vault `json:"items"`
}

func init() {
	register(&Vault{}, &VaultList{})
}
