package controllertest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
)

// NitroEnclaveDeployment is a NED in ns with one user plugin, app: an
// image by tag, a command, one variable and one port.
func NitroEnclaveDeployment(ns, name string, opts ...func(*enclavev1beta1.NitroEnclaveDeployment)) *enclavev1beta1.NitroEnclaveDeployment {
	n := &enclavev1beta1.NitroEnclaveDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: enclavev1beta1.NitroEnclaveDeploymentSpec{UserPlugins: []enclavev1beta1.UserPlugin{{
			Name: "app", Image: "registry.example/app:1", Command: []string{"/app"},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "one"}},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

// ConfidentialRuntime is a cluster-scoped runtime of platform with the
// defaults of its CRD.
func ConfidentialRuntime(name, platform string, opts ...func(*basev1beta1.ConfidentialRuntime)) *basev1beta1.ConfidentialRuntime {
	r := &basev1beta1.ConfidentialRuntime{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: basev1beta1.ConfidentialRuntimeSpec{Platform: platform}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// WithContainerd sets where the nodes keep containerd's configuration and
// socket.
func WithContainerd(config, socket string) func(*basev1beta1.ConfidentialRuntime) {
	return func(r *basev1beta1.ConfidentialRuntime) {
		r.Spec.ContainerdConfig, r.Spec.ContainerdSocket = config, socket
	}
}

// LAS is a cluster-scoped LAS whose release goes to the operator's
// namespace.
func LAS(name string, opts ...func(*basev1beta1.LAS)) *basev1beta1.LAS {
	l := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, o := range opts {
		o(l)
	}
	return l
}
