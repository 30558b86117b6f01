package common

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// State summarises a service CR for humans and monitoring.
// +kubebuilder:validation:Enum=HEALTHY;PENDING;UNHEALTHY
type State string

// The states of every service: HEALTHY when reconciled without problems,
// PENDING while reconciling or waiting, UNHEALTHY when an alert or a problem
// needs action.
const (
	StateHealthy   State = "HEALTHY"
	StatePending   State = "PENDING"
	StateUnhealthy State = "UNHEALTHY"
)

// NodeSelector selects nodes by label, with keys and values checked as
// Kubernetes checks them on pods, so a typo is refused at apply time rather
// than leaving a DaemonSet that can never schedule.
// +kubebuilder:validation:MaxProperties=64
// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="every nodeSelector key must be a label name: an optional DNS subdomain prefix and '/', then 1-63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit (e.g. cloister.dev/sgx)"
type NodeSelector map[string]LabelValue

// LabelValue is a Kubernetes label value.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type LabelValue string

// Map returns the selector as the plain map pod specs use.
func (s NodeSelector) Map() map[string]string {
	if s == nil {
		return nil
	}
	m := make(map[string]string, len(s))
	for k, v := range s {
		m[k] = string(v)
	}
	return m
}

// ServiceSpec is the configuration every service CR has: image, pull
// policy and secrets, resources, node selector and pod annotations.
type ServiceSpec struct {
	// AutoUpdate lets the operator roll the service to the newest image of
	// its image's version line: the highest vMAJOR.MINOR.PATCH tag of the
	// same repository, major and minor version (no pre-releases), read
	// from the registry with ImagePullSecrets every 10 minutes, pinned by
	// digest. status.autoUpdate says what it chose and from where. Not
	// for CAS: a new image is a new measurement, which its owners approve.
	// +optional
	AutoUpdate bool `json:"autoUpdate,omitempty"`

	// Image is the OCI image of the service. Empty means the image the
	// operator was released with.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// ImagePullPolicy says when to pull Image.
	// +optional
	// +kubebuilder:default=Always
	// +kubebuilder:validation:Enum=Always;Never;IfNotPresent
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets are secrets in the service's namespace used to pull
	// Image.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Resources are the compute resources of the service's container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector must match a node's labels for the service to run there.
	// +optional
	NodeSelector NodeSelector `json:"nodeSelector,omitempty"`

	// PodAnnotations are added to the service's pods.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`
}

// ServiceStatus is what every service CR reports.
type ServiceStatus struct {
	// State is HEALTHY, PENDING or UNHEALTHY.
	// +optional
	State State `json:"state,omitempty"`

	// Conditions are the conditions of the CR (IsHealthy, ReleaseExists, ...)
	// and, prefixed with the
	// owned object they describe (e.g. daemonset.apps/las.OwnedObjectHealthy),
	// the conditions of every owned object.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation of the spec the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// AutoUpdate is what spec.autoUpdate chose, and when.
	// +optional
	AutoUpdate *AutoUpdateStatus `json:"autoUpdate,omitempty"`
}

// AutoUpdateStatus is the image spec.autoUpdate follows.
type AutoUpdateStatus struct {
	// Image is the image the service runs: the newest of its line, by tag
	// and digest.
	// +optional
	Image string `json:"image,omitempty"`
	// Previous is the image the last update replaced.
	// +optional
	Previous string `json:"previous,omitempty"`
	// Source is the repository whose tags were read.
	// +optional
	Source string `json:"source,omitempty"`
	// UpdatedAt is when the image last changed.
	// +optional
	UpdatedAt *metav1.Time `json:"updatedAt,omitempty"`
	// CheckedAt is when the registry was last read.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// Message says why the last check changed nothing, if it failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// DeviceMode says how a device plugin kind offers its nodes' devices to
// pods.
// +kubebuilder:validation:Enum=DevicePlugin;DRA;Both
type DeviceMode string

const (
	// DeviceModeDevicePlugin offers them as extended resources, which
	// pods ask for in their containers' limits.
	DeviceModeDevicePlugin DeviceMode = "DevicePlugin"
	// DeviceModeDRA publishes them in ResourceSlices of the family's
	// Dynamic Resource Allocation driver, which pods ask for by
	// ResourceClaims (and, through the DeviceClass's extended resource,
	// by their limits).
	DeviceModeDRA DeviceMode = "DRA"
	// DeviceModeBoth runs both during a migration: the DRA driver owns
	// the devices; the device plugin registers no resource with the
	// kubelet (which then hands pods' limits to the DRA driver) and keeps
	// cleaning up after the pods that hold devices through it.
	DeviceModeBoth DeviceMode = "Both"
)

// Runs says whether a mode runs the device plugin and the DRA driver.
func (m DeviceMode) Runs() (devicePlugin, dra bool) {
	switch m {
	case DeviceModeDRA:
		return false, true
	case DeviceModeBoth:
		return true, true
	}
	return true, false
}
