// Package policyres owns the Kubernetes resources that carry a CAS policy:
// a SignedPolicy from a signed policy and back, an EncryptedPolicy from a
// sealed one, and the name and namespace such a resource gets. The CLI
// writes them; the operator reads them.
package policyres

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// ErrNotSignedPolicy is returned for a file that is another kind.
var ErrNotSignedPolicy = errors.New("not a SignedPolicy")

// IsSignedPolicy says whether data is a SignedPolicy resource (rather
// than a policy document).
func IsSignedPolicy(data []byte) bool {
	var head struct {
		Kind string `json:"kind"`
	}
	return yaml.Unmarshal(data, &head) == nil && head.Kind == "SignedPolicy"
}

// ParseSignedPolicy reads a SignedPolicy resource strictly.
func ParseSignedPolicy(data []byte) (*casv1beta1.SignedPolicy, error) {
	var sp casv1beta1.SignedPolicy
	if err := yaml.UnmarshalStrict(data, &sp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSignedPolicy, err)
	}
	if sp.Kind != "SignedPolicy" {
		return nil, fmt.Errorf("%w but %q", ErrNotSignedPolicy, sp.Kind)
	}
	return &sp, nil
}

// Signed is the signed policy a SignedPolicy carries.
func Signed(sp *casv1beta1.SignedPolicy) *policy.Signed {
	s := &policy.Signed{
		Policy: sp.Spec.Policy,
		Link:   policy.Link{Version: sp.Spec.Version, Predecessor: sp.Spec.Predecessor},
		// Empty, not absent, as the resource's list may be.
		Signatures: make([]policy.Signature, 0, len(sp.Spec.Signatures)),
	}
	for _, sg := range sp.Spec.Signatures {
		s.Signatures = append(s.Signatures, policy.Signature{Signer: sg.Signer, Signature: sg.Signature})
	}
	return s
}

// LinkAfter is the place in the chain of the version after the one sp
// carries, for a new version of the policy named name.
func LinkAfter(sp *casv1beta1.SignedPolicy, name string) (policy.Link, error) {
	prev, err := policy.Parse([]byte(sp.Spec.Policy))
	if err != nil {
		return policy.Link{}, fmt.Errorf("spec.policy: %w", err)
	}
	if prev.Name != name {
		return policy.Link{}, fmt.Errorf("it is policy %s, not %s", prev.Name, name)
	}
	if sp.Spec.Version < 1 {
		return policy.Link{}, errors.New("spec.version is missing: it was signed before versioned signatures; ask CAS for the current version instead")
	}
	return policy.Link{Version: sp.Spec.Version + 1, Predecessor: prev.Digest()}, nil
}

// Meta is the name and namespace of a resource carrying the policy text:
// name, or else the policy's name without its namespace, in the Kubernetes
// namespace of the policy's name (shop for shop/web), the only one whose
// resources the operator registers it from.
func Meta(text, name string) (metav1.ObjectMeta, error) {
	d, err := policy.Parse([]byte(text))
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: policy.Namespace(d.Name)}
	if meta.Name == "" {
		meta.Name = strings.TrimPrefix(d.Name, meta.Namespace+"/")
	}
	if errs := validation.IsDNS1123Subdomain(meta.Name); len(errs) > 0 {
		return meta, fmt.Errorf("resource name %q: %s", meta.Name, strings.Join(errs, "; "))
	}
	return meta, nil
}

// NewSignedPolicy is the SignedPolicy that registers s with the CAS at
// address.
func NewSignedPolicy(meta metav1.ObjectMeta, address string, s *policy.Signed) *casv1beta1.SignedPolicy {
	sigs := make([]casv1beta1.Signature, len(s.Signatures))
	for i, sg := range s.Signatures {
		sigs[i] = casv1beta1.Signature{Signer: sg.Signer, Signature: sg.Signature}
	}
	return &casv1beta1.SignedPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: casv1beta1.GroupVersion.String(), Kind: "SignedPolicy"},
		ObjectMeta: meta,
		Spec: casv1beta1.SignedPolicySpec{CASAddress: address, Policy: s.Policy,
			Version: s.Version, Predecessor: s.Predecessor, Signatures: sigs},
	}
}

// NewEncryptedPolicy is the EncryptedPolicy that registers the sealed
// policy with the CAS at address.
func NewEncryptedPolicy(meta metav1.ObjectMeta, address string, sealed *policy.Encrypted) *casv1beta1.EncryptedPolicy {
	return &casv1beta1.EncryptedPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: casv1beta1.GroupVersion.String(), Kind: "EncryptedPolicy"},
		ObjectMeta: meta,
		Spec:       casv1beta1.EncryptedPolicySpec{CASAddress: address, Policy: sealed.Policy, EncryptionKey: sealed.EncryptionKey},
	}
}

// Registration is what a SignedPolicy or EncryptedPolicy resource asks of
// CAS, read from its YAML: its spec is a registration request.
func Registration(data []byte) (*wire.PolicyRequest, error) {
	var res struct {
		Kind string             `json:"kind"`
		Spec wire.PolicyRequest `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &res); err != nil || (res.Kind != "SignedPolicy" && res.Kind != "EncryptedPolicy") {
		return nil, errors.New("want a SignedPolicy or EncryptedPolicy resource (cloister policy sign/encrypt)")
	}
	return &res.Spec, nil
}
