package policyres

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

const doc = "version: cloister.dev/policy/v1\nname: shop/web\nservices: []\n"

// A signed policy survives the trip through its resource, which lands in
// the namespace of the policy's name.
func TestSignedPolicyRoundTrip(t *testing.T) {
	s := &policy.Signed{Policy: doc, Link: policy.Link{Version: 2, Predecessor: "sha256:" + strings.Repeat("a", 64)},
		Signatures: []policy.Signature{{Signer: "sha256:" + strings.Repeat("b", 64), Signature: "c2ln"}}}
	meta, err := Meta(doc, "")
	if err != nil {
		t.Fatal(err)
	}
	if meta.Name != "web" || meta.Namespace != "shop" {
		t.Errorf("meta %s/%s, want shop/web", meta.Namespace, meta.Name)
	}
	sp := NewSignedPolicy(meta, "cas.shop.svc:8081", s)
	back := Signed(sp)
	if back.Policy != s.Policy || back.Link != s.Link || len(back.Signatures) != 1 || back.Signatures[0] != s.Signatures[0] {
		t.Errorf("round trip: %+v, want %+v", back, s)
	}
	if _, err := Meta(doc, "Not_A_Name"); err == nil || !strings.Contains(err.Error(), "Not_A_Name") {
		t.Errorf("a bad name: %v", err)
	}
}

// The version after a SignedPolicy is one more, chained to its digest;
// another policy's resource or an unversioned one gives none.
func TestLinkAfter(t *testing.T) {
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := Meta(doc, "")
	sp := NewSignedPolicy(meta, "", &policy.Signed{Policy: doc, Link: policy.Link{Version: 3}})
	link, err := LinkAfter(sp, "shop/web")
	if err != nil || link.Version != 4 || link.Predecessor != d.Digest() {
		t.Errorf("LinkAfter: %+v, %v", link, err)
	}
	if _, err := LinkAfter(sp, "shop/other"); err == nil {
		t.Error("another policy's resource gave a link")
	}
	sp.Spec.Version = 0
	if _, err := LinkAfter(sp, "shop/web"); err == nil || !strings.Contains(err.Error(), "spec.version") {
		t.Errorf("an unversioned resource: %v", err)
	}
	if _, err := ParseSignedPolicy([]byte("kind: EncryptedPolicy\n")); err == nil || !errors.Is(err, ErrNotSignedPolicy) {
		t.Errorf("an EncryptedPolicy: %v", err)
	}
}

// A resource's spec is the registration CAS is sent; anything else is
// refused by name.
func TestRegistration(t *testing.T) {
	meta, _ := Meta(doc, "")
	data, err := yaml.Marshal(NewSignedPolicy(meta, "cas.shop.svc:8081", &policy.Signed{Policy: doc, Link: policy.Link{Version: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := Registration(data)
	if err != nil || req.Policy != doc || req.Version != 1 || req.CASAddress != "cas.shop.svc:8081" {
		t.Errorf("Registration: %+v, %v", req, err)
	}
	if _, err := Registration([]byte("kind: ConfigMap\n")); err == nil || !strings.Contains(err.Error(), "SignedPolicy or EncryptedPolicy") {
		t.Errorf("a ConfigMap: %v", err)
	}
}
