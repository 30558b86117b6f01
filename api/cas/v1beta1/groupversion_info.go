// Package v1beta1 holds the cas.cloister.dev/v1beta1 API.
// +kubebuilder:object:generate=true
// +groupName=cas.cloister.dev
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "cas.cloister.dev", Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this API with a scheme.
	// Only apimachinery: importing the API links no controller library.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the kinds of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// register adds kinds to SchemeBuilder; each kind's file calls it from init.
func register(objs ...runtime.Object) {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objs...)
		return nil
	})
}
