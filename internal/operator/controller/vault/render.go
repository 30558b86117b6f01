package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// Render makes the policy of v's pods as the operator makes it, from v's
// spec, its CAS and runtime class (read through r) and the initializer
// image its owners trust: what they sign, computed where they sign it,
// so the operator's published policy is a convenience, not a trust.
func Render(ctx context.Context, r client.Reader, v *servicesv1beta1.Vault, initializerImage string) (*policy.Document, error) {
	k := &Kind{Base: service.Base{Reader: r}, InitializerImage: initializerImage}
	ns, values, err := k.Release(v, "")
	if err != nil {
		return nil, err
	}
	manifests, err := charts.Render("vault", ReleasePrefix+"-"+v.Name, ns, values)
	if err != nil {
		return nil, err
	}
	var c Confidential
	raw, err := json.Marshal(values["confidential"])
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	for file, text := range manifests {
		if path.Base(file) != "statefulset.yaml" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := sigsyaml.Unmarshal([]byte(text), &u.Object); err != nil {
			return nil, fmt.Errorf("the Vault's StatefulSet: %w", err)
		}
		if err := k.PostRender(v, values, u); err != nil {
			return nil, err
		}
		value, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", podpolicy.Annotation)
		_, digest, err := podpolicy.FromAnnotation(value)
		if err != nil {
			return nil, fmt.Errorf("the Vault's pod policy: %w", err)
		}
		return Policy(v, PolicyInput{Platform: c.Platform, Digest: digest, CAS: c.CAS})
	}
	return nil, fmt.Errorf("the Vault chart renders no StatefulSet")
}
