package charts

import (
	"bytes"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/operator/admission"
)

const testOperatorImage = "ghcr.io/cloister-cc/cloister-operator@sha256:0000000000000000000000000000000000000000000000000000000000000000"

// renderOperator renders the operator chart into its objects by kind/name.
func renderOperator(t *testing.T, values map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	return renderOperatorIn(t, "ops", values)
}

// renderOperatorIn renders the operator chart into namespace ns.
func renderOperatorIn(t *testing.T, ns string, values map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	if _, set := values["image"]; !set {
		values["image"] = testOperatorImage
	}
	out, err := Render("cloister-operator", "cloister", ns, values)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*unstructured.Unstructured{}
	for name, manifest := range out {
		dec := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
		for {
			var o unstructured.Unstructured
			if err := dec.Decode(&o.Object); err != nil {
				break
			}
			if len(o.Object) == 0 {
				continue
			}
			key := o.GetKind() + "/" + o.GetName()
			if objs[key] != nil {
				t.Fatalf("%s rendered twice (%s)", key, name)
			}
			objs[key] = &o
		}
	}
	return objs
}

func as[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	if o == nil {
		t.Fatal("object not rendered")
	}
	data, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := yaml.UnmarshalStrict(data, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

// The chart lints clean with the Helm SDK's linter, as `helm lint` does.
func TestOperatorChartLints(t *testing.T) {
	res := action.NewLint().Run([]string{"cloister-operator"}, map[string]any{"image": testOperatorImage})
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev { // INFO (e.g. "icon is recommended") does not fail helm lint either
			t.Errorf("helm lint: %s", m.Error())
		}
	}
	for _, err := range res.Errors {
		t.Errorf("helm lint: %v", err)
	}
}

// An image by tag is refused with the fix, not deployed.
func TestOperatorImageByDigest(t *testing.T) {
	_, err := Render("cloister-operator", "cloister", "ops", map[string]any{"image": "ghcr.io/cloister-cc/cloister-operator:v1"})
	if err == nil || !strings.Contains(err.Error(), "is not pinned by digest") {
		t.Fatalf("render: %v", err)
	}
}

// The Deployment runs as the security baseline asks, with leader
// election, probes and the webhook certificate in its own Secret.
func TestOperatorDeployment(t *testing.T) {
	objs := renderOperator(t, map[string]any{})
	d := as[appsv1.Deployment](t, objs["Deployment/cloister-operator"])
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	switch {
	case *d.Spec.Replicas != 2:
		t.Errorf("replicas %d", *d.Spec.Replicas)
	case c.Image != testOperatorImage:
		t.Errorf("image %s", c.Image)
	case pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot,
		pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault":
		t.Errorf("pod security %+v", pod.SecurityContext)
	case c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem,
		c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation,
		len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL":
		t.Errorf("container security %+v", c.SecurityContext)
	case c.ReadinessProbe == nil || c.LivenessProbe == nil || c.StartupProbe == nil:
		t.Error("probes missing")
	case !slices.Contains(c.Args, "--leader-elect"), !slices.Contains(c.Args, "--webhook-cert-secret=cloister-operator-webhook-cert"),
		!slices.Contains(c.Args, "--webhook-dns-name=cloister-operator-webhook.ops.svc"):
		t.Errorf("args %v", c.Args)
	case c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero():
		t.Errorf("resources %+v", c.Resources)
	}
	if objs["PodDisruptionBudget/cloister-operator"] == nil || objs["Secret/cloister-operator-webhook-cert"] == nil {
		t.Error("PodDisruptionBudget or certificate Secret missing")
	}
	if one := renderOperator(t, map[string]any{"replicas": 1}); one["PodDisruptionBudget/cloister-operator"] != nil {
		t.Error("a PodDisruptionBudget for one replica blocks node drains")
	}
	// Every default image the operator has can be set from the chart.
	images := map[string]any{"devicePlugin": "r/dp:1", "las": "r/las:1", "cas": "r/cas:1", "nodeInstaller": "r/ni:1", "enclave": "r/enc:1"}
	set := as[appsv1.Deployment](t, renderOperator(t, map[string]any{"images": images})["Deployment/cloister-operator"])
	for _, want := range []string{"--device-plugin-image=r/dp:1", "--las-image=r/las:1", "--cas-image=r/cas:1", "--node-installer-image=r/ni:1", "--enclave-image=r/enc:1"} {
		if !slices.Contains(set.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("images %v: args %v lack %s", images, set.Spec.Template.Spec.Containers[0].Args, want)
		}
	}
}

// Every path the operator serves has a webhook and every webhook a path;
// every webhook fails closed, and the pod webhook sees only the pods that
// opt in, so that a stopped operator blocks no other pod.
func TestOperatorWebhooks(t *testing.T) {
	objs := renderOperator(t, map[string]any{})
	v := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs["ValidatingWebhookConfiguration/cloister-operator"])
	m := as[admissionregistrationv1.MutatingWebhookConfiguration](t, objs["MutatingWebhookConfiguration/cloister-operator"])
	var paths []string
	check := func(name string, cc admissionregistrationv1.WebhookClientConfig, policy *admissionregistrationv1.FailurePolicyType, sel bool) {
		if cc.Service == nil || cc.Service.Name != "cloister-operator-webhook" || cc.Service.Namespace != "ops" || cc.Service.Path == nil {
			t.Errorf("%s: clientConfig %+v", name, cc)
			return
		}
		paths = append(paths, *cc.Service.Path)
		pod := *cc.Service.Path == admission.PathInjectPod
		switch {
		case pod && !sel:
			t.Errorf("%s: the pod webhook must match only opted-in pods", name)
		case *policy != admissionregistrationv1.Fail:
			t.Errorf("%s: fails open: a pod (or resource) would be admitted unchecked while the operator is down", name)
		}
	}
	for _, w := range v.Webhooks {
		check(w.Name, w.ClientConfig, w.FailurePolicy, w.ObjectSelector != nil)
	}
	for _, w := range m.Webhooks {
		sel := w.ObjectSelector != nil && len(w.ObjectSelector.MatchExpressions) == 1 && w.ObjectSelector.MatchExpressions[0].Key == admission.LabelInject
		check(w.Name, w.ClientConfig, w.FailurePolicy, sel)
	}
	slices.Sort(paths)
	want := slices.Clone(admission.Paths)
	slices.Sort(want)
	if !slices.Equal(paths, want) {
		t.Errorf("webhook paths %v, the operator serves %v", paths, want)
	}

	// Beside the cluster, calls go to a URL.
	objs = renderOperator(t, map[string]any{"webhook": map[string]any{"url": "https://localhost:9443", "urlHost": "localhost"}})
	v = as[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs["ValidatingWebhookConfiguration/cloister-operator"])
	if u := v.Webhooks[0].ClientConfig.URL; u == nil || *u != "https://localhost:9443"+admission.PathValidateSignedPolicy {
		t.Errorf("url %v", u)
	}
}

// The CRDs are kept on uninstall; the ClusterRole is the generated one.
func TestOperatorCRDsAndRBAC(t *testing.T) {
	objs := renderOperator(t, map[string]any{})
	files, _ := os.ReadDir("cloister-operator/files/crds")
	n := 0
	for key, o := range objs {
		if strings.HasPrefix(key, "CustomResourceDefinition/") {
			n++
			if o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s is not kept on uninstall", key)
			}
		}
	}
	if n == 0 || n != len(files) {
		t.Errorf("%d CRDs rendered, %d generated", n, len(files))
	}
	if none := renderOperator(t, map[string]any{"crds": map[string]any{"install": false}}); none["CustomResourceDefinition/las.base.cloister.dev"] != nil {
		t.Error("crds.install=false still installs CRDs")
	}
	role := as[rbacv1.ClusterRole](t, objs["ClusterRole/cloister-operator"])
	generated, err := os.ReadFile("cloister-operator/files/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want rbacv1.ClusterRole
	if err := yaml.Unmarshal(bytes.Split(generated, []byte("\n---\n"))[0], &want); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 || len(role.Rules) != len(want.Rules) {
		t.Errorf("ClusterRole has %d rules, generated %d", len(role.Rules), len(want.Rules))
	}
	r := as[rbacv1.Role](t, objs["Role/cloister-operator"])
	if r.Namespace != "ops" || len(r.Rules) == 0 {
		t.Errorf("Role %+v", r)
	}
	// CAS's fixed role: its state and its peers' endpoints, nothing else;
	// labelled as the operator's objects.
	cas := as[rbacv1.ClusterRole](t, objs["ClusterRole/cloister-cas-state"])
	if len(cas.Rules) != 2 || cas.Rules[0].Resources[0] != "casstaterecords" || cas.Rules[1].Resources[0] != "endpointslices" ||
		slices.Contains(cas.Rules[1].Verbs, "get") || cas.Labels["app.kubernetes.io/part-of"] == "" {
		t.Errorf("ClusterRole cloister-cas-state: %+v", cas)
	}
	// The backup's: reading CAS's state, nothing else.
	bk := as[rbacv1.ClusterRole](t, objs["ClusterRole/cloister-cas-backup"])
	if len(bk.Rules) != 1 || len(bk.Rules[0].Resources) != 1 || bk.Rules[0].Resources[0] != "casstaterecords" ||
		!slices.Equal(bk.Rules[0].Verbs, []string{"get", "list"}) || bk.Labels["app.kubernetes.io/part-of"] == "" {
		t.Errorf("ClusterRole cloister-cas-backup: %+v", bk)
	}
}

// With cert-manager asked for, it issues the certificate (self-signed
// Issuer unless one is named) and injects the CA; the operator only serves.
func TestOperatorWithCertManager(t *testing.T) {
	objs := renderOperator(t, map[string]any{"webhook": map[string]any{"certManager": map[string]any{"enabled": true}}})
	cert := objs["Certificate/cloister-operator-webhook-cert"]
	if cert == nil || objs["Issuer/cloister-operator-selfsigned"] == nil || objs["Secret/cloister-operator-webhook-cert"] != nil {
		t.Fatalf("objects: %v", slices.Sorted(maps.Keys(objs)))
	}
	if dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames"); len(dns) != 1 || dns[0] != "cloister-operator-webhook.ops.svc" {
		t.Errorf("dnsNames %v", dns)
	}
	for _, k := range []string{"ValidatingWebhookConfiguration/cloister-operator", "MutatingWebhookConfiguration/cloister-operator"} {
		if got := objs[k].GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "ops/cloister-operator-webhook-cert" {
			t.Errorf("%s inject-ca-from %q", k, got)
		}
	}
	d := as[appsv1.Deployment](t, objs["Deployment/cloister-operator"])
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--webhook-cert-manager=true") {
		t.Errorf("args %v", d.Spec.Template.Spec.Containers[0].Args)
	}
	named := renderOperator(t, map[string]any{"webhook": map[string]any{"certManager": map[string]any{"enabled": true,
		"issuerRef": map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}}}})
	if named["Issuer/cloister-operator-selfsigned"] != nil {
		t.Error("a self-signed Issuer beside a named one")
	}
	if ref, _, _ := unstructured.NestedStringMap(named["Certificate/cloister-operator-webhook-cert"].Object, "spec", "issuerRef"); ref["name"] != "corp-ca" || ref["kind"] != "ClusterIssuer" {
		t.Errorf("issuerRef %v", ref)
	}
}

// Scrapers need the metrics-reader role; the readers given are bound to it.
func TestOperatorMetricsReaders(t *testing.T) {
	objs := renderOperator(t, map[string]any{})
	role := as[rbacv1.ClusterRole](t, objs["ClusterRole/cloister-operator-metrics-reader"])
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("metrics reader rules %+v", role.Rules)
	}
	if objs["ClusterRoleBinding/cloister-operator-metrics-reader"] != nil {
		t.Error("a binding without readers")
	}
	objs = renderOperator(t, map[string]any{"metrics": map[string]any{"port": 8443,
		"readers": []any{map[string]any{"name": "prometheus", "namespace": "monitoring"}}}})
	b := as[rbacv1.ClusterRoleBinding](t, objs["ClusterRoleBinding/cloister-operator-metrics-reader"])
	if b.RoleRef.Name != "cloister-operator-metrics-reader" || len(b.Subjects) != 1 || b.Subjects[0].Name != "prometheus" || b.Subjects[0].Namespace != "monitoring" {
		t.Errorf("binding %+v", b)
	}
	role = as[rbacv1.ClusterRole](t, objs["ClusterRole/cloister-operator"])
	var reviews int
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "tokenreviews") || slices.Contains(r.Resources, "subjectaccessreviews") {
			reviews++
		}
	}
	if reviews != 2 {
		t.Errorf("the operator's role cannot review tokens and access (%d rules): secure metrics would refuse every scraper", reviews)
	}
}

// imageSignatureKey reaches the operator as a mounted file its flag names;
// without it neither is rendered.
func TestOperatorImageSignatureKey(t *testing.T) {
	const key = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
	objs := renderOperator(t, map[string]any{"imageSignatureKey": key})
	cm := objs["ConfigMap/cloister-operator-image-signature-key"]
	if cm == nil {
		t.Fatal("no ConfigMap of the key")
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "key.pub"); got != key {
		t.Errorf("the key as rendered: %q", got)
	}
	d := as[appsv1.Deployment](t, objs["Deployment/cloister-operator"])
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--image-signature-key=/etc/cloister/image-signature-key/key.pub") ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.MountPath == "/etc/cloister/image-signature-key" && m.ReadOnly
		}) {
		t.Errorf("args %v, mounts %v", c.Args, c.VolumeMounts)
	}
	none := renderOperator(t, map[string]any{})
	plain := as[appsv1.Deployment](t, none["Deployment/cloister-operator"]).Spec.Template.Spec.Containers[0]
	if none["ConfigMap/cloister-operator-image-signature-key"] != nil || slices.ContainsFunc(plain.Args, func(a string) bool {
		return strings.HasPrefix(a, "--image-signature-key")
	}) {
		t.Error("a key rendered without imageSignatureKey")
	}
}
