package cas

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// A CAS in a confidential VM is CAS only by the launch measurement and
// its own pod policy: the measurement is the runtime class's, which every
// pod of the class shares. So its pods carry initdata as a workload's do
// (podpolicy: the pod policy and the kata agent policy generated from
// it, which the guest enforces), whose digest the VM's evidence shows as
// host data; status.hostData publishes it for clients to pin.

var _ service.PostRenderer = (*Kind)(nil)

// PostRender annotates the pod template of a confidential CAS with the
// initdata of its own pod policy, computed from the rendered template.
func (k *Kind) PostRender(obj service.Object, _ map[string]any, u *unstructured.Unstructured) error {
	if as(obj).Spec.ConfidentialVM == nil || u.GetKind() != "StatefulSet" {
		return nil
	}
	var ss appsv1.StatefulSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ss); err != nil {
		return err
	}
	p, err := podpolicy.Of(&ss.Spec.Template.Spec, ss.Spec.Template.Annotations)
	if err != nil {
		return fmt.Errorf("CAS's pod policy: %w: a CAS in a confidential VM runs only an image pinned by digest (spec.image REPOSITORY@sha256:...)", err)
	}
	value, _ := p.AnnotationValue()
	return unstructured.SetNestedField(u.Object, value, "spec", "template", "metadata", "annotations", podpolicy.Annotation)
}

// hostData is the host data (hex) the operator gave CAS's pods: the digest
// of the initdata on the StatefulSet it renders, "" without one.
func hostData(oos []service.Owned) string {
	for _, oo := range oos {
		if oo.Desired == nil || oo.Desired.GetKind() != "StatefulSet" {
			continue
		}
		value, _, _ := unstructured.NestedString(oo.Desired.Object, "spec", "template", "metadata", "annotations", podpolicy.Annotation)
		if value == "" {
			return ""
		}
		if _, digest, err := podpolicy.FromAnnotation(value); err == nil {
			return digest
		}
	}
	return ""
}
