package install

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/charts"
)

const testImage = "ghcr.io/cloister-cc/cloister-operator@sha256:1111111111111111111111111111111111111111111111111111111111111111"

// A CA certificate in PEM, as the operator's Secret holds it.
const testCA = `-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIQIRi6zePL6mKjOipn+dNuaTAKBggqhkjOPQQDAjASMRAw
DgYDVQQKEwdBY21lIENvMB4XDTE3MTAyMDE5NDMwNloXDTE4MTAyMDE5NDMwNlow
EjEQMA4GA1UEChMHQWNtZSBDbzBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABD0d
7VNhbWvZLWPuj/RtHFjvtJBEwOkhbN/BnnE8rnZR8+sbwnc/KhCk3FhnpHZnQz7B
5aETbbIgmuvewdjvSBSjYzBhMA4GA1UdDwEB/wQEAwICpDATBgNVHSUEDDAKBggr
BgEFBQcDATAPBgNVHRMBAf8EBTADAQH/MCkGA1UdEQQiMCCCDmxvY2FsaG9zdDo1
NDUzgg4xMjcuMC4wLjE6NTQ1MzAKBggqhkjOPQQDAgNIADBFAiEA2zpJEPQyz6/l
Wf86aX6PepsntZv2GYlA5UpabfT2EZICICpJ5h/iI+i341gBmLiAFQOyTDT+/wQc
6MF9+Yw1Yy0t
-----END CERTIFICATE-----
`

func want(t *testing.T) Want {
	t.Helper()
	ch, err := charts.Load("cloister-operator")
	if err != nil {
		t.Fatal(err)
	}
	crds, err := CRDFiles(ch)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) < 7 {
		t.Fatalf("%d CRDs in the chart", len(crds))
	}
	return Want{Namespace: "cloister-system", CRDs: crds, Image: testImage}
}

// healthy is a cluster where all is well.
func healthy(w Want) *State {
	s := &State{
		Namespace: &corev1.Namespace{},
		CRDs:      map[string]*apiextensionsv1.CustomResourceDefinition{},
		Release:   "deployed",
		Deployment: &appsv1.Deployment{
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "operator", Image: testImage}}}}},
			Status: appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 2},
		},
		Service:     &corev1.Service{},
		Endpoints:   []discoveryv1.EndpointSlice{{Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}},
		Validating:  &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{{ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte(testCA)}}}},
		Mutating:    &admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{{ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte(testCA)}}}},
		CertSecret:  &corev1.Secret{Data: map[string][]byte{"ca.crt": []byte(testCA)}},
		PullSecrets: map[string]*corev1.Secret{},
		SGXPlugin:   &basev1beta1.SGXPlugin{Status: basev1beta1.SGXPluginStatus{ServiceStatus: common.ServiceStatus{State: common.StateHealthy}}},
		LAS:         &basev1beta1.LAS{Status: basev1beta1.LASStatus{ServiceStatus: common.ServiceStatus{State: common.StateHealthy}}},
	}
	for name, digest := range w.CRDs {
		s.CRDs[name] = &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationCRDDigest: digest}},
			Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}},
		}
	}
	return s
}

func TestJudge(t *testing.T) {
	w := want(t)
	const crd = "las.base.cloister.dev"
	for _, tc := range []struct {
		name   string
		break_ func(*State, *Want)
		want   []string // "part: message" fragments, one per problem, in order
	}{
		{"all is well", func(*State, *Want) {}, nil},
		{"no namespace: only it and the CRDs are judged", func(s *State, _ *Want) { s.Namespace = nil },
			[]string{"namespace: namespace cloister-system does not exist"}},
		{"a CRD deleted", func(s *State, _ *Want) { delete(s.CRDs, crd) },
			[]string{"crd: CustomResourceDefinition las.base.cloister.dev is missing"}},
		{"a CRD of another version", func(s *State, _ *Want) { s.CRDs[crd].Annotations = nil },
			[]string{"crd: CustomResourceDefinition las.base.cloister.dev is not this version's"}},
		{"no release", func(s *State, _ *Want) { s.Release = "" }, []string{"release: Helm release cloister-system/cloister is not installed"}},
		{"a failed release", func(s *State, _ *Want) { s.Release = "failed" }, []string{"release: Helm release cloister-system/cloister is failed, not deployed"}},
		{"the operator scaled to 0", func(s *State, _ *Want) { s.Deployment.Spec.Replicas = ptr.To[int32](0) },
			[]string{"operator: Deployment cloister-operator is scaled to 0"}},
		{"one replica not ready", func(s *State, _ *Want) { s.Deployment.Status.ReadyReplicas = 1 },
			[]string{"operator: Deployment cloister-operator: 1 of 2 replicas ready and updated"}},
		{"another image", func(s *State, w *Want) { w.Image = strings.Replace(testImage, "1111", "2222", 1) },
			[]string{"operator: Deployment cloister-operator runs " + testImage + ", want"}},
		{"the webhook Service deleted", func(s *State, _ *Want) { s.Service = nil },
			[]string{"webhook: Service cloister-system/cloister-operator-webhook is missing"}},
		{"no endpoint", func(s *State, _ *Want) { s.Endpoints = nil },
			[]string{"webhook: Service cloister-operator-webhook has no ready endpoint"}},
		{"a corrupt caBundle", func(s *State, _ *Want) { s.Mutating.Webhooks[0].ClientConfig.CABundle = []byte("garbage") },
			[]string{"cabundle: the webhooks' caBundle is not a PEM certificate"}},
		{"a caBundle of another CA", func(s *State, _ *Want) {
			s.CertSecret.Data["ca.crt"] = []byte(strings.Replace(testCA, "MIIB", "MIIB", 1) + "\n\n")
			s.Validating.Webhooks[0].ClientConfig.CABundle = []byte(testCA[:len(testCA)-40] + "AAAA\n-----END CERTIFICATE-----\n")
		}, []string{"cabundle: the webhooks' caBundle"}},
		{"a pull secret deleted", func(s *State, _ *Want) { s.PullSecrets[PullSecretName] = nil },
			[]string{"pull-secret: pull secret cloister-system/cloister-pull the operator's pods use is missing"}},
		{"LAS not healthy", func(s *State, _ *Want) { s.LAS.Status.State = common.StatePending },
			[]string{"las: LAS las is PENDING (kubectl describe las las says why)"}},
		{"no SGXPlugin", func(s *State, _ *Want) { s.SGXPlugin = nil }, []string{"sgxplugin: SGXPlugin sgxplugin is missing"}},
		{"no SGXPlugin, and none wanted", func(s *State, w *Want) { s.SGXPlugin = nil; w.NoSGXPlugin = true }, nil},
		{"only the operator wanted", func(s *State, w *Want) { s.SGXPlugin, s.LAS = nil, nil; w.OnlyOperator = true }, nil},
		{"the dev cluster's real node wanted, any node selected", func(s *State, w *Want) { w.NodeSelector = map[string]string{"cloister.dev/real-node": "true"} },
			[]string{"operator: Deployment cloister-operator's pods may run on nodes without cloister.dev/real-node=true, which run nothing"}},
		{"the dev cluster's real node wanted and selected", func(s *State, w *Want) {
			w.NodeSelector = map[string]string{"cloister.dev/real-node": "true"}
			s.Deployment.Spec.Template.Spec.NodeSelector = map[string]string{"cloister.dev/real-node": "true", "kubernetes.io/os": "linux"}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := w
			s := healthy(w)
			tc.break_(s, &w)
			got := Judge(s, w)
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
			for i, p := range got {
				if !strings.Contains(p.String(), tc.want[i]) {
					t.Errorf("problem %q, want %q", p, tc.want[i])
				}
			}
		})
	}
}

// The CRs install creates are the samples users read about.
func TestDefaultCRsAreTheSamples(t *testing.T) {
	for file, got := range map[string]any{"base_v1beta1_sgxplugin.yaml": DefaultSGXPluginCR().Spec, "base_v1beta1_las.yaml": DefaultLASCR().Spec} {
		data, err := os.ReadFile(filepath.Join("../../../config/samples", file))
		if err != nil {
			t.Fatal(err)
		}
		var sample struct{ Spec map[string]any }
		if err := yaml.Unmarshal(data, &sample); err != nil {
			t.Fatal(err)
		}
		b, _ := yaml.Marshal(got)
		var spec map[string]any
		if err := yaml.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		for k, v := range spec {
			if m, ok := v.(map[string]any); ok && len(m) == 0 {
				continue // an empty struct the sample leaves out
			}
			if !reflect.DeepEqual(sample.Spec[k], v) {
				t.Errorf("%s: spec.%s is %v, the sample's %v", file, k, v, sample.Spec[k])
			}
		}
	}
}
