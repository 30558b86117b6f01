package runtimeclass

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
)

// SimRuntimeYAML is the ConfidentialRuntime of platform sim (insecure,
// for development) for the nodes selector names, whose containerd keeps
// its configuration and socket at config and socket: as a user writes
// it, without status or empty metadata.
func SimRuntimeYAML(selector common.NodeSelector, config, socket string) ([]byte, error) {
	ccr := basev1beta1.ConfidentialRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: basev1beta1.GroupVersion.String(), Kind: "ConfidentialRuntime"},
		ObjectMeta: metav1.ObjectMeta{Name: string(Sim)},
		Spec: basev1beta1.ConfidentialRuntimeSpec{
			ServiceSpec:      common.ServiceSpec{ImagePullPolicy: corev1.PullIfNotPresent, NodeSelector: selector},
			Platform:         string(Sim),
			ContainerdConfig: config,
			ContainerdSocket: socket,
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ccr)
	if err != nil {
		return nil, err
	}
	delete(obj, "status")
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	return yaml.Marshal(obj)
}
