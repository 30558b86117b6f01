package admission

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cloister-cc/cloister/internal/base/tee"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// LabelInject asks for injection: its value names what the pod gets. The
// pod webhook's objectSelector matches only pods carrying it.
const LabelInject = "cloister.dev/inject"

// AnnotationInjected records what was injected, for people and for
// idempotence.
const AnnotationInjected = "cloister.dev/injected"

// InjectSGX is the LabelInject value for SGX enclaves.
const InjectSGX = "sgx"

// Inject mutates a pod that asks for it by LabelInject; a pod that does
// not is left as it is. Injecting twice changes nothing; a container that
// already sets a limit or variable keeps its own.
func Inject(pod *corev1.Pod) error {
	what, ok := pod.Labels[LabelInject]
	if !ok {
		return nil
	}
	switch what {
	case InjectSGX:
		for i := range pod.Spec.Containers {
			injectSGX(&pod.Spec.Containers[i])
		}
	default:
		return fmt.Errorf("metadata.labels[%s]: %q is not something Cloister injects: use %q, or remove the label", LabelInject, what, InjectSGX)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationInjected] = what
	return nil
}

func injectSGX(c *corev1.Container) {
	enclave := corev1.ResourceName(tee.SGXEnclave)
	if _, set := c.Resources.Limits[enclave]; !set {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[enclave] = resource.MustParse("1")
	}
	// Extended resources are not overcommitted: a request must equal the
	// limit, so one set to something else is the user's error to see.
	// Its node's LAS, which runs with a host port on every SGX node.
	for _, v := range laswire.PodEnv() {
		setEnv(c, v)
	}
}

// setEnv appends v unless the container defines the name already. Order
// matters: $(CLOISTER_NODE_IP) expands only after its definition.
func setEnv(c *corev1.Container, v corev1.EnvVar) {
	if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
		return
	}
	c.Env = append(c.Env, v)
}
