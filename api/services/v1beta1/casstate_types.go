package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CASStateEntry is one record of CAS's state as CAS stored it: sealed under
// a key derived from CAS's root seed (a few plain records hold nothing
// secret), and covered by a digest CAS checks when it unlocks.
type CASStateEntry struct {
	// Bucket and Key name the record.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Bucket string `json:"bucket"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key"`
	// Value as CAS stored it; empty when the transaction deleted the record.
	// +optional
	Value []byte `json:"value,omitempty"`
	// Deleted: the transaction removed the record.
	// +optional
	Deleted bool `json:"deleted,omitempty"`
}

// CASStateRecordSpec is one record of a CAS's state, or (in the object
// named CAS-head) the generation the state is at and the records of the
// transaction that made it, which every replica takes in and applies to
// the records a crash may have left behind.
type CASStateRecordSpec struct {
	// Generation of CAS's state that wrote this object.
	// +kubebuilder:validation:Minimum=1
	Generation int64 `json:"generation"`
	// Records: one in a record object; a transaction's in the head.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	Records []CASStateEntry `json:"records,omitempty"`
}

// CASStateRecord holds CAS's state on the Kubernetes API, for a CAS with
// replicas: written and read by CAS only (its service account is the only
// one the ClusterRole cloister-cas-state is bound to). Nothing in it is
// trusted: values are sealed by CAS, and a record changed, removed, added
// or replaced by an older copy is refused when CAS unlocks. Do not edit.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=casstaterecords,singular=casstaterecord
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.spec.generation`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CASStateRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CASStateRecordSpec `json:"spec"`
}

// CASStateRecordList is a list of CASStateRecord.
// +kubebuilder:object:root=true
type CASStateRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CASStateRecord `json:"items"`
}

func init() {
	register(&CASStateRecord{}, &CASStateRecordList{})
}
