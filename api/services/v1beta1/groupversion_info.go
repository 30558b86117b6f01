// Package v1beta1 holds the services.cloister.dev/v1beta1 API.
// +kubebuilder:object:generate=true
// +groupName=services.cloister.dev
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "services.cloister.dev", Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this API with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
