package admission

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation/field"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/deviceplugin/cex"
)

// CEXPlugin refuses config sets the device plugin would refuse; an APQN
// in two sets (it would be handed to two projects) is named with both.
func CEXPlugin(p *basev1beta1.CEXPlugin) field.ErrorList {
	var errs field.ErrorList
	for _, err := range unjoin(cex.ConfigOf(&p.Spec).Validate()) {
		errs = append(errs, field.Invalid(field.NewPath("spec"), field.OmitValueType{}, err.Error()))
	}
	return errs
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// DefaultNamespace sets an unset spec.namespace to the operator's, so the
// stored object says where its pods run.
func DefaultNamespace(ns *string, operatorNamespace string) {
	if *ns == "" {
		*ns = operatorNamespace
	}
}

// ImageWarnings warns about an image named by tag: what runs can change
// under the same name. It is a warning, not a refusal: pinning is the
// user's choice (an empty image means the operator's default, which is
// pinned by digest).
func ImageWarnings(spec *common.ServiceSpec) []string {
	if spec.Image == "" {
		return nil
	}
	ref, err := name.ParseReference(spec.Image)
	if err != nil {
		return []string{fmt.Sprintf("spec.image %q does not parse as an image reference: %v", spec.Image, err)}
	}
	if _, pinned := ref.(name.Digest); !pinned {
		return []string{fmt.Sprintf("spec.image %q is named by tag, not by digest: what runs can change under the same name; pin it as %s@sha256:...", spec.Image, ref.Context().Name())}
	}
	return nil
}
