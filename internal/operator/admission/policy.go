package admission

import (
	"encoding/base64"
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// fingerprintRE is policy.Fingerprint's form.
var fingerprintRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// An ASN.1 ECDSA P-256 signature is 8..72 bytes.
const minSignature, maxSignature = 8, 72

// SignedPolicy checks what CAS would refuse before it could look at the
// owners' keys: the document must parse and validate, and each signature
// must be well formed. Whether the signatures verify is CAS's decision: a
// new version of a policy is authorized by the owners of the version CAS
// holds, which the API server cannot know.
func SignedPolicy(p *casv1beta1.SignedPolicy) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if doc, err := policy.Parse([]byte(p.Spec.Policy)); err != nil {
		errs = append(errs, field.Invalid(spec.Child("policy"), field.OmitValueType{},
			fmt.Sprintf("the policy document is invalid: %v", err)))
	} else if err := policy.InNamespace(doc.Name, p.Namespace); err != nil {
		errs = append(errs, field.Invalid(spec.Child("policy"), field.OmitValueType{}, err.Error()))
	}
	if err := (policy.Link{Version: p.Spec.Version, Predecessor: p.Spec.Predecessor}).Validate(); err != nil {
		errs = append(errs, field.Invalid(spec.Child("predecessor"), p.Spec.Predecessor, err.Error()))
	}
	seen := map[string]int{}
	for i, s := range p.Spec.Signatures {
		at := spec.Child("signatures").Index(i)
		if !fingerprintRE.MatchString(s.Signer) {
			errs = append(errs, field.Invalid(at.Child("signer"), s.Signer,
				"want the owner key's fingerprint, sha256:<64 hex digits>, as cloister policy sign writes it"))
		} else if j, dup := seen[s.Signer]; dup {
			errs = append(errs, field.Duplicate(at.Child("signer"), fmt.Sprintf("%s (also signatures[%d])", s.Signer, j)))
		}
		seen[s.Signer] = i
		raw, err := base64.StdEncoding.DecodeString(s.Signature)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(at.Child("signature"), field.OmitValueType{}, "not base64: sign the policy again (cloister policy sign)"))
		case len(raw) < minSignature || len(raw) > maxSignature:
			errs = append(errs, field.Invalid(at.Child("signature"), field.OmitValueType{},
				fmt.Sprintf("%d bytes, not an ECDSA P-256 signature (%d..%d bytes): sign the policy again (cloister policy sign)", len(raw), minSignature, maxSignature)))
		}
	}
	return errs
}

// The HPKE encapsulated key (X25519, 32 bytes) and the AEAD tag (16 bytes)
// are in every sealed policy.
const minSealed = 32 + 16

// EncryptedPolicy checks the envelope: the key it names must be a CAS
// encryption key and the policy base64 long enough to hold a sealed
// policy. Only the CAS can open it.
func EncryptedPolicy(p *casv1beta1.EncryptedPolicy) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if _, err := policy.DecodePublicKey(p.Spec.EncryptionKey); err != nil {
		errs = append(errs, field.Invalid(spec.Child("encryptionKey"), p.Spec.EncryptionKey,
			fmt.Sprintf("%v: use the CAS's key as cloister policy encrypt --cas writes it", err)))
	}
	raw, err := base64.StdEncoding.DecodeString(p.Spec.Policy)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(spec.Child("policy"), field.OmitValueType{}, "not base64: encrypt the policy again (cloister policy encrypt)"))
	case len(raw) < minSealed:
		errs = append(errs, field.Invalid(spec.Child("policy"), field.OmitValueType{},
			fmt.Sprintf("%d bytes, too short for a sealed policy (at least %d): encrypt the policy again (cloister policy encrypt)", len(raw), minSealed)))
	}
	return errs
}
