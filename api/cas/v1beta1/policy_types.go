package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// Signature is one policy owner's detached signature over the policy.
type Signature struct {
	// Signer identifies the owner key (its public key or fingerprint).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Signer string `json:"signer"`
	// Signature over the canonical policy bytes, base64.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Signature string `json:"signature"`
}

// SignedPolicySpec is the output of `cloister policy sign`: a policy signed
// by its owners. It is not edited field by field: owners re-sign and apply
// the whole resource.
type SignedPolicySpec struct {
	// CASAddress is the CAS the policy is registered with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	CASAddress string `json:"casAddress"`
	// Policy is the policy document.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1048576
	Policy string `json:"policy"`
	// Version is the place in the policy's chain the owners signed it
	// for: 1 for a new policy, one more than CAS's current version for a
	// change. CAS refuses it anywhere else, so an old version cannot be
	// replayed.
	// +kubebuilder:validation:Minimum=1
	Version int `json:"version"`
	// Predecessor is the digest (SHA-256, hex) of the version this one
	// replaces, as the owners signed it; empty for version 1.
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{64})?$`
	// +optional
	Predecessor string `json:"predecessor,omitempty"`
	// Signatures of the policy's owners over the policy, its version and
	// its predecessor.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Signatures []Signature `json:"signatures"`
}

// EncryptedPolicySpec is the output of `cloister policy encrypt`: a signed
// policy sealed to the CAS key, so only CAS can read it.
type EncryptedPolicySpec struct {
	// CASAddress is the CAS the policy is registered with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	CASAddress string `json:"casAddress"`
	// Policy is the policy sealed to the CAS, base64.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1048576
	Policy string `json:"policy"`
	// EncryptionKey is the CAS public encryption key the policy is sealed to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	EncryptionKey string `json:"encryptionKey"`
}

// PolicyStatus reports the registration of a policy with its CAS.
type PolicyStatus struct {
	common.ServiceStatus `json:",inline"`

	// PolicyName is the name inside the policy document.
	// +optional
	PolicyName string `json:"policyName,omitempty"`
	// Hash is CAS's digest (SHA-256, hex) of the registered policy version.
	// +optional
	Hash string `json:"hash,omitempty"`

	// Predecessor is the hash of the version this one replaced; empty for
	// a policy's first version.
	// +optional
	Predecessor string `json:"predecessor,omitempty"`

	// Revision is the policy's version number in CAS: 1 for a new policy,
	// one more for each accepted change.
	// +optional
	Revision int `json:"revision,omitempty"`

	// CASRootCA is the root CA (SHA-256 of its DER, hex) of the CAS that
	// holds the registration. A CAS with another one was initialised
	// again (its state lost or replaced), and the policy is registered
	// with it again.
	// +optional
	CASRootCA string `json:"casRootCA,omitempty"`
}

// SignedPolicy registers a policy, signed by its owners, with a CAS.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=spol,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.status.policyName`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Hash",type=string,JSONPath=`.status.hash`
// +kubebuilder:printcolumn:name="Predecessor",type=string,JSONPath=`.status.predecessor`,priority=1
// +kubebuilder:printcolumn:name="CAS",type=string,JSONPath=`.spec.casAddress`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SignedPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is immutable: a changed field would no longer match the owners'
	// signatures. To change a policy, sign it again and create the result.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: editing a field would break the owners' signatures; sign the changed policy again (cloister policy sign) and create it as a new SignedPolicy, or delete this one and create the new one"
	Spec   SignedPolicySpec `json:"spec"`
	Status PolicyStatus     `json:"status,omitempty"`
}

// SignedPolicyList is a list of SignedPolicies.
// +kubebuilder:object:root=true
type SignedPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SignedPolicy `json:"items"`
}

// EncryptedPolicy registers a policy, sealed to the CAS's key, with a CAS.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=epol,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.status.policyName`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Hash",type=string,JSONPath=`.status.hash`
// +kubebuilder:printcolumn:name="Predecessor",type=string,JSONPath=`.status.predecessor`,priority=1
// +kubebuilder:printcolumn:name="CAS",type=string,JSONPath=`.spec.casAddress`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EncryptedPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is immutable: it is sealed to the CAS as a whole. To change a
	// policy, sign and encrypt it again and create the result.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: the sealed policy cannot be edited field by field; encrypt the changed policy again (cloister policy encrypt) and create it as a new EncryptedPolicy, or delete this one and create the new one"
	Spec   EncryptedPolicySpec `json:"spec"`
	Status PolicyStatus        `json:"status,omitempty"`
}

// EncryptedPolicyList is a list of EncryptedPolicies.
// +kubebuilder:object:root=true
type EncryptedPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EncryptedPolicy `json:"items"`
}

func init() {
	register(&SignedPolicy{}, &SignedPolicyList{}, &EncryptedPolicy{}, &EncryptedPolicyList{})
}
