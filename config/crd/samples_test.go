package crd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// Every kind has a sample in config/samples named as the SCONE operator names them
// (<group>_v1beta1_<kind>.yaml, CR <kind>-sample), and the API server
// accepts each as it is, with strict field validation: a sample with a
// misspelt field would fail here rather than confuse a user.
func TestSamplesAreAccepted(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(cfg)
	files, err := filepath.Glob("../samples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := obj(t, string(data))
		kind := strings.ToLower(u.GetKind())
		kinds[u.GetKind()] = true
		group, _, _ := strings.Cut(u.GetAPIVersion(), ".")
		if want := group + "_v1beta1_" + kind + ".yaml"; filepath.Base(f) != want {
			t.Errorf("sample of %s is %s, want %s", u.GetKind(), filepath.Base(f), want)
		}
		if want := kind + "-sample"; u.GetName() != want {
			t.Errorf("%s: CR name %q, want %q", f, u.GetName(), want)
		}
		ri := dyn.Resource(resourceOf(u))
		opts := metav1.CreateOptions{FieldValidation: "Strict"}
		if u.GetNamespace() != "" {
			_, err = ri.Namespace(u.GetNamespace()).Create(context.Background(), u, opts)
		} else {
			_, err = ri.Create(context.Background(), u, opts)
		}
		if err != nil {
			t.Errorf("%s rejected: %v", f, err)
		}
	}
	for _, k := range []string{"CAS", "LAS", "SGXPlugin", "CEXPlugin", "SignedPolicy", "EncryptedPolicy", "NitroEnclaveDeployment", "Vault"} {
		if !kinds[k] {
			t.Errorf("no sample of %s in config/samples", k)
		}
	}
}

// The SignedPolicy sample is signed as `cloister policy sign` signs today:
// its owner's signature verifies over the document at its version, so
// applying it to a CAS would register it.
func TestSignedPolicySampleVerifies(t *testing.T) {
	data, err := os.ReadFile("../samples/cas_v1beta1_signedpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sp casv1beta1.SignedPolicy
	if err := yaml.UnmarshalStrict(data, &sp); err != nil {
		t.Fatal(err)
	}
	d, err := policy.Parse([]byte(sp.Spec.Policy))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := d.OwnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	var sigs []policy.Signature
	for _, s := range sp.Spec.Signatures {
		sigs = append(sigs, policy.Signature{Signer: s.Signer, Signature: s.Signature})
	}
	signers, err := policy.Signers(d, policy.Link{Version: sp.Spec.Version, Predecessor: sp.Spec.Predecessor}, sigs, keys)
	if err != nil || len(signers) < d.OwnerThreshold() {
		t.Errorf("the sample's signatures: %d of %d needed, %v: sign it again (cloister policy sign --version 1)", len(signers), d.OwnerThreshold(), err)
	}
}
