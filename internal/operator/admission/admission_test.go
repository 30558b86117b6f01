package admission

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// signed is a SignedPolicy as cloister policy sign makes it.
func signed(t testing.TB) *casv1beta1.SignedPolicy {
	t.Helper()
	key, err := policy.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := string(policy.MarshalPublicKey(&key.PublicKey))
	doc := "version: cloister.dev/policy/v1\nname: default/sample\nowners:\n  keys:\n  - |\n    " +
		strings.ReplaceAll(strings.TrimSpace(pub), "\n", "\n    ") + `
services:
- name: app
  attestation:
    identities:
    - type: sgx
      mrenclave: ` + strings.Repeat("ab", 32) + `
  certificate:
    sans: [app.default.svc]
`
	s := &policy.Signed{Policy: doc, Link: policy.Link{Version: 1}}
	if err := policy.Sign(s, key); err != nil {
		t.Fatal(err)
	}
	p := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: casv1beta1.SignedPolicySpec{CASAddress: "https://cas:8081", Policy: s.Policy, Version: 1}}
	for _, sig := range s.Signatures {
		p.Spec.Signatures = append(p.Spec.Signatures, casv1beta1.Signature{Signer: sig.Signer, Signature: sig.Signature})
	}
	return p
}

func TestSignedPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*casv1beta1.SignedPolicy)
		want []string // one fragment per expected error
	}{
		{"as cloister policy sign writes it", func(*casv1beta1.SignedPolicy) {}, nil},
		{"a policy that does not parse", func(p *casv1beta1.SignedPolicy) { p.Spec.Policy = "name: [" },
			[]string{"spec.policy: Invalid value: the policy document is invalid"}},
		{"a policy that does not validate names the inner field", func(p *casv1beta1.SignedPolicy) {
			p.Spec.Policy = strings.Replace(p.Spec.Policy, "name: app", "name: App_1", 1)
		}, []string{"spec.policy: Invalid value: the policy document is invalid: services[0] (App_1): name: use lowercase"}},
		{"an unknown field", func(p *casv1beta1.SignedPolicy) { p.Spec.Policy += "colour: blue\n" },
			[]string{`spec.policy: Invalid value: the policy document is invalid: error unmarshaling JSON: while decoding JSON: json: unknown field "colour"`}},
		{"a policy of another namespace", func(p *casv1beta1.SignedPolicy) { p.Namespace = "shop" },
			[]string{"spec.policy: Invalid value: the policy is named default/sample, outside namespace shop: a policy resource registers only policies named shop/NAME in CAS; name it shop/sample"}},
		{"a policy of no namespace", func(p *casv1beta1.SignedPolicy) {
			p.Spec.Policy = strings.Replace(p.Spec.Policy, "name: default/sample", "name: sample", 1)
		}, []string{"the policy is named sample, outside namespace default", "name it default/sample"}},
		{"a signer that is not a fingerprint", func(p *casv1beta1.SignedPolicy) { p.Spec.Signatures[0].Signer = "alice" },
			[]string{`spec.signatures[0].signer: Invalid value: "alice": want the owner key's fingerprint`}},
		{"a signature that is not base64", func(p *casv1beta1.SignedPolicy) { p.Spec.Signatures[0].Signature = "not base64!" },
			[]string{"spec.signatures[0].signature: Invalid value: not base64"}},
		{"a signature of the wrong size", func(p *casv1beta1.SignedPolicy) {
			p.Spec.Signatures[0].Signature = base64.StdEncoding.EncodeToString(make([]byte, 100))
		}, []string{"spec.signatures[0].signature: Invalid value: 100 bytes, not an ECDSA P-256 signature"}},
		{"version 1 naming a predecessor", func(p *casv1beta1.SignedPolicy) { p.Spec.Predecessor = strings.Repeat("ab", 32) },
			[]string{"spec.predecessor: Invalid value: \"abab", "version 1 replaces nothing"}},
		{"version 2 without a predecessor", func(p *casv1beta1.SignedPolicy) { p.Spec.Version = 2 },
			[]string{"spec.predecessor: Invalid value: \"\"", "version 2 needs the digest"}},
		{"one signer twice", func(p *casv1beta1.SignedPolicy) { p.Spec.Signatures = append(p.Spec.Signatures, p.Spec.Signatures[0]) },
			[]string{"spec.signatures[1].signer: Duplicate value:", "(also signatures[0])"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := signed(t)
			tc.edit(p)
			errs := SignedPolicy(p)
			if len(tc.want) == 0 {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("%d errors, want one: %v", len(errs), errs.ToAggregate())
			}
			for _, w := range tc.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("error %q does not say %q", errs[0].Error(), w)
				}
			}
		})
	}
}

func TestEncryptedPolicy(t *testing.T) {
	casKey, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyB64 := base64.StdEncoding.EncodeToString(casKey.PublicKey().Bytes())
	s := signed(t)
	enc, err := policy.Encrypt(&policy.Signed{Policy: s.Spec.Policy, Signatures: []policy.Signature{{Signer: s.Spec.Signatures[0].Signer, Signature: s.Spec.Signatures[0].Signature}}}, mustPub(t, keyB64))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*casv1beta1.EncryptedPolicySpec)
		want string
	}{
		{"as cloister policy encrypt writes it", func(*casv1beta1.EncryptedPolicySpec) {}, ""},
		{"a key that is not base64", func(s *casv1beta1.EncryptedPolicySpec) { s.EncryptionKey = "%%" }, "spec.encryptionKey: Invalid value: \"%%\": encryption key: not base64"},
		{"a key of the wrong size", func(s *casv1beta1.EncryptedPolicySpec) { s.EncryptionKey = "AAAA" }, "not an X25519 public key"},
		{"a policy that is not base64", func(s *casv1beta1.EncryptedPolicySpec) { s.Policy = "{json}" }, "spec.policy: Invalid value: not base64"},
		{"a policy too short to be sealed", func(s *casv1beta1.EncryptedPolicySpec) { s.Policy = "AAAA" }, "spec.policy: Invalid value: 3 bytes, too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &casv1beta1.EncryptedPolicy{Spec: casv1beta1.EncryptedPolicySpec{CASAddress: "https://cas:8081", Policy: enc.Policy, EncryptionKey: enc.EncryptionKey}}
			tc.edit(&p.Spec)
			errs := EncryptedPolicy(p)
			switch {
			case tc.want == "" && len(errs) != 0:
				t.Fatalf("refused: %v", errs.ToAggregate())
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Fatalf("errors %v, want one saying %q", errs.ToAggregate(), tc.want)
			}
		})
	}
}

func mustPub(t *testing.T, b64 string) hpke.PublicKey {
	t.Helper()
	k, err := policy.DecodePublicKey(b64)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCEXPluginSharedAPQN(t *testing.T) {
	p := &basev1beta1.CEXPlugin{Spec: basev1beta1.CEXPluginSpec{ConfigSets: []basev1beta1.CryptoConfigSet{
		{Name: "payments", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}},
		{Name: "audit", APQNs: []basev1beta1.APQN{{Adapter: 4, Domain: 11}, {Adapter: 3, Domain: 11}}},
	}}}
	errs := CEXPlugin(p)
	want := `spec: Invalid value: configSets[1] (audit).apqns[1]: duplicate APQN 03.000b (adapter 3, domain 11), already in set "payments"`
	if len(errs) != 1 || errs[0].Error() != want {
		t.Fatalf("errors %v, want %q", errs.ToAggregate(), want)
	}
	p.Spec.ConfigSets[1].APQNs = p.Spec.ConfigSets[1].APQNs[:1]
	if errs := CEXPlugin(p); len(errs) != 0 {
		t.Fatalf("distinct APQNs refused: %v", errs.ToAggregate())
	}
}

func TestImageWarnings(t *testing.T) {
	for image, warn := range map[string]string{
		"": "",
		"ghcr.io/cloister-cc/cloister-las@sha256:" + strings.Repeat("0", 64): "",
		"ghcr.io/cloister-cc/cloister-las:v1":                                "is named by tag, not by digest",
		"ghcr.io/cloister-cc/cloister-las":                                   "is named by tag",
		"UPPER/case":                                                         "does not parse",
	} {
		got := ImageWarnings(&common.ServiceSpec{Image: image})
		if (warn == "") != (len(got) == 0) || (warn != "" && !strings.Contains(got[0], warn)) {
			t.Errorf("%q: warnings %q, want one saying %q", image, got, warn)
		}
	}
}

func TestInject(t *testing.T) {
	enclave := corev1.ResourceName(tee.SGXEnclave)
	pod := func(label string, c ...corev1.Container) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: c}}
		if label != "" {
			p.Labels = map[string]string{LabelInject: label}
		}
		return p
	}
	t.Run("unlabelled pods are not touched", func(t *testing.T) {
		p := pod("", corev1.Container{Name: "app"})
		before := p.DeepCopy()
		if err := Inject(p); err != nil || !apiequality.Semantic.DeepEqual(p, before) {
			t.Fatalf("changed %+v, err %v", p, err)
		}
	})
	t.Run("sgx: the device limit and the LAS address in every container, once", func(t *testing.T) {
		p := pod(InjectSGX, corev1.Container{Name: "app"}, corev1.Container{Name: "side"})
		if err := Inject(p); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Spec.Containers {
			if q := c.Resources.Limits[enclave]; q.Cmp(resource.MustParse("1")) != 0 {
				t.Errorf("%s: limit %s, want 1", c.Name, q.String())
			}
			if len(c.Env) != 2 || c.Env[0].Name != laswire.EnvNodeIP || c.Env[0].ValueFrom.FieldRef.FieldPath != "status.hostIP" ||
				c.Env[1].Name != laswire.EnvAddr || c.Env[1].Value != "http://$(CLOISTER_NODE_IP):18766" {
				t.Errorf("%s: env %+v", c.Name, c.Env)
			}
		}
		if p.Annotations[AnnotationInjected] != InjectSGX {
			t.Errorf("annotations %v", p.Annotations)
		}
		again := p.DeepCopy()
		if err := Inject(again); err != nil || !apiequality.Semantic.DeepEqual(p, again) {
			t.Errorf("a second injection changed the pod: %+v", again)
		}
	})
	t.Run("what the pod sets itself stays", func(t *testing.T) {
		p := pod(InjectSGX, corev1.Container{Name: "app",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{enclave: resource.MustParse("2")}},
			Env:       []corev1.EnvVar{{Name: laswire.EnvAddr, Value: "http://las.example:18766"}}})
		if err := Inject(p); err != nil {
			t.Fatal(err)
		}
		c := p.Spec.Containers[0]
		if q := c.Resources.Limits[enclave]; q.Value() != 2 || len(c.Env) != 2 || c.Env[0].Value != "http://las.example:18766" {
			t.Errorf("the pod's own settings were overwritten: %+v", c)
		}
	})
	t.Run("an unknown value is refused, saying what is known", func(t *testing.T) {
		err := Inject(pod("tdx", corev1.Container{Name: "app"}))
		if err == nil || !strings.Contains(err.Error(), `metadata.labels[cloister.dev/inject]: "tdx" is not something Cloister injects: use "sgx"`) {
			t.Fatalf("err %v", err)
		}
	})
}

// The samples users copy pass what the webhooks check.
func TestSamplesPass(t *testing.T) {
	read := func(name string, into any) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("../../../config/samples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var sp casv1beta1.SignedPolicy
	read("cas_v1beta1_signedpolicy.yaml", &sp)
	var ep casv1beta1.EncryptedPolicy
	read("cas_v1beta1_encryptedpolicy.yaml", &ep)
	var cp basev1beta1.CEXPlugin
	read("base_v1beta1_cexplugin.yaml", &cp)
	for name, errs := range map[string]field.ErrorList{"SignedPolicy": SignedPolicy(&sp), "EncryptedPolicy": EncryptedPolicy(&ep), "CEXPlugin": CEXPlugin(&cp)} {
		if len(errs) != 0 {
			t.Errorf("the %s sample is refused: %v", name, errs.ToAggregate())
		}
	}
}
