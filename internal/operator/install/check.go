package install

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
)

// Names in the operator chart (charts/cloister-operator).
const (
	ReleaseName    = "cloister"
	Deployment     = "cloister-operator"
	WebhookService = "cloister-operator-webhook"
	CertSecret     = "cloister-operator-webhook-cert"
	WebhookConfig  = "cloister-operator"
	// AnnotationCRDDigest is the SHA-256 of the CRD file a CRD was applied
	// from: a CRD of another version has another.
	AnnotationCRDDigest = "cloister.dev/crd-sha256"
	// DefaultSGXPlugin and DefaultLAS are the CRs install creates.
	DefaultSGXPlugin = "sgxplugin"
	DefaultLAS       = "las"
)

// Part names what a problem is about; Reconcile repairs by part.
type Part string

const (
	PartNamespace  Part = "namespace"
	PartCRD        Part = "crd"
	PartRelease    Part = "release"
	PartOperator   Part = "operator"
	PartWebhook    Part = "webhook"
	PartCABundle   Part = "cabundle"
	PartPullSecret Part = "pull-secret"
	PartSGXPlugin  Part = "sgxplugin"
	PartLAS        Part = "las"
)

// Problem is one thing not as it should be.
type Problem struct {
	Part    Part
	Message string
}

func (p Problem) String() string { return string(p.Part) + ": " + p.Message }

// State is what Check read from the cluster.
type State struct {
	Namespace   *corev1.Namespace
	CRDs        map[string]*apiextensionsv1.CustomResourceDefinition // by name; nil: missing
	Release     string                                               // Helm status of the latest revision; "" none
	Deployment  *appsv1.Deployment
	Service     *corev1.Service
	Endpoints   []discoveryv1.EndpointSlice
	Validating  *admissionregistrationv1.ValidatingWebhookConfiguration
	Mutating    *admissionregistrationv1.MutatingWebhookConfiguration
	CertSecret  *corev1.Secret
	PullSecrets map[string]*corev1.Secret // the Deployment's imagePullSecrets; nil: missing
	SGXPlugin   *basev1beta1.SGXPlugin
	LAS         *basev1beta1.LAS
}

// Want is what the cluster should have.
type Want struct {
	Namespace string
	// CRDs are the embedded CRD files by CRD name, with their digests.
	CRDs map[string]string
	// Image of the operator.
	Image        string
	OnlyOperator bool
	NoSGXPlugin  bool
	// NodeSelector the operator's pods must have (the dev cluster's real
	// node); nil: any.
	NodeSelector map[string]string
}

// CRDFiles reads the CRD names and digests from the operator chart's files.
func CRDFiles(ch *chart.Chart) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range ch.Files {
		name, data := f.Name, f.Data
		if path.Dir(name) != "files/crds" {
			continue
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sum := sha256.Sum256(data)
		out[crd.Name] = hex.EncodeToString(sum[:])
	}
	return out, nil
}

// Judge lists every problem of s against w, in a stable order. Pure.
func Judge(s *State, w Want) []Problem {
	var ps []Problem
	add := func(part Part, format string, args ...any) {
		ps = append(ps, Problem{part, fmt.Sprintf(format, args...)})
	}
	if s.Namespace == nil {
		add(PartNamespace, "namespace %s does not exist", w.Namespace)
	}
	for _, name := range slices.Sorted(maps.Keys(w.CRDs)) {
		crd := s.CRDs[name]
		switch {
		case crd == nil:
			add(PartCRD, "CustomResourceDefinition %s is missing", name)
		case crd.Annotations[AnnotationCRDDigest] != w.CRDs[name]:
			add(PartCRD, "CustomResourceDefinition %s is not this version's", name)
		case !established(crd):
			add(PartCRD, "CustomResourceDefinition %s is not established", name)
		}
	}
	if s.Namespace == nil {
		return ps
	}
	if s.Release != "deployed" {
		if s.Release == "" {
			add(PartRelease, "Helm release %s/%s is not installed", w.Namespace, ReleaseName)
		} else {
			add(PartRelease, "Helm release %s/%s is %s, not deployed", w.Namespace, ReleaseName, s.Release)
		}
	}
	ps = append(ps, judgeOperator(s, w)...)
	ps = append(ps, judgeWebhooks(s, w)...)
	for _, name := range slices.Sorted(maps.Keys(s.PullSecrets)) {
		if s.PullSecrets[name] == nil {
			add(PartPullSecret, "pull secret %s/%s the operator's pods use is missing", w.Namespace, name)
		}
	}
	if !w.OnlyOperator {
		if !w.NoSGXPlugin {
			judgeCR(&ps, PartSGXPlugin, "SGXPlugin", DefaultSGXPlugin, statusOf(s.SGXPlugin))
		}
		judgeCR(&ps, PartLAS, "LAS", DefaultLAS, statusOf(s.LAS))
	}
	return ps
}

// statusOf is the status of a CR read from the cluster, nil when it is
// missing (a nil pointer).
func statusOf[T interface{ GetServiceStatus() *common.ServiceStatus }](o T) *common.ServiceStatus {
	var zero T
	if any(o) == any(zero) {
		return nil
	}
	return o.GetServiceStatus()
}

// judgeCR: st nil means the CR is missing.
func judgeCR(ps *[]Problem, part Part, kind, name string, st *common.ServiceStatus) {
	switch {
	case st == nil:
		*ps = append(*ps, Problem{part, fmt.Sprintf("%s %s is missing", kind, name)})
	case st.State != common.StateHealthy:
		*ps = append(*ps, Problem{part, fmt.Sprintf("%s %s is %s (kubectl describe %s %s says why)", kind, name, cmp.Or(string(st.State), "not reconciled yet"), strings.ToLower(kind), name)})
	}
}

func judgeOperator(s *State, w Want) []Problem {
	d := s.Deployment
	if d == nil {
		return []Problem{{PartOperator, fmt.Sprintf("Deployment %s/%s is missing", w.Namespace, Deployment)}}
	}
	var ps []Problem
	var image string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "operator" {
			image = c.Image
		}
	}
	if image != w.Image {
		ps = append(ps, Problem{PartOperator, fmt.Sprintf("Deployment %s runs %s, want %s", Deployment, image, w.Image)})
	}
	for _, k := range slices.Sorted(maps.Keys(w.NodeSelector)) {
		if v, ok := d.Spec.Template.Spec.NodeSelector[k]; !ok || v != w.NodeSelector[k] {
			ps = append(ps, Problem{PartOperator, fmt.Sprintf("Deployment %s's pods may run on nodes without %s=%s, which run nothing", Deployment, k, w.NodeSelector[k])})
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	switch {
	case want == 0:
		ps = append(ps, Problem{PartOperator, fmt.Sprintf("Deployment %s is scaled to 0", Deployment)})
	case d.Status.ReadyReplicas < want || d.Status.UpdatedReplicas < want || d.Status.ObservedGeneration < d.Generation:
		ps = append(ps, Problem{PartOperator, fmt.Sprintf("Deployment %s: %d of %d replicas ready and updated", Deployment, min(d.Status.ReadyReplicas, d.Status.UpdatedReplicas), want)})
	}
	return ps
}

func judgeWebhooks(s *State, w Want) []Problem {
	var ps []Problem
	add := func(part Part, format string, args ...any) {
		ps = append(ps, Problem{part, fmt.Sprintf(format, args...)})
	}
	if s.Service == nil {
		add(PartWebhook, "Service %s/%s is missing", w.Namespace, WebhookService)
	} else if !anyReady(s.Endpoints) && !beside(s) {
		add(PartWebhook, "Service %s has no ready endpoint: no operator replica serves the webhooks", WebhookService)
	}
	if s.Validating == nil {
		add(PartWebhook, "ValidatingWebhookConfiguration %s is missing", WebhookConfig)
	}
	if s.Mutating == nil {
		add(PartWebhook, "MutatingWebhookConfiguration %s is missing", WebhookConfig)
	}
	if s.CertSecret == nil || len(s.CertSecret.Data["ca.crt"]) == 0 {
		add(PartCABundle, "Secret %s/%s holds no CA yet", w.Namespace, CertSecret)
		return ps
	}
	ca := s.CertSecret.Data["ca.crt"]
	var bundles [][]byte
	if s.Validating != nil {
		for _, h := range s.Validating.Webhooks {
			bundles = append(bundles, h.ClientConfig.CABundle)
		}
	}
	if s.Mutating != nil {
		for _, h := range s.Mutating.Webhooks {
			bundles = append(bundles, h.ClientConfig.CABundle)
		}
	}
	for _, b := range bundles {
		if err := validBundle(b, ca); err != nil {
			add(PartCABundle, "the webhooks' caBundle %v", err)
			break
		}
	}
	return ps
}

// beside: the webhooks are called by URL (an operator outside the
// cluster), so the Service has no endpoints by design.
func beside(s *State) bool {
	return s.Validating != nil && len(s.Validating.Webhooks) > 0 && s.Validating.Webhooks[0].ClientConfig.URL != nil
}

func validBundle(bundle, ca []byte) error {
	block, _ := pem.Decode(bundle)
	if block == nil {
		return fmt.Errorf("is not a PEM certificate")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	if !bytes.Equal(bytes.TrimSpace(bundle), bytes.TrimSpace(ca)) {
		return fmt.Errorf("is not the CA in Secret %s", CertSecret)
	}
	return nil
}

func anyReady(slices []discoveryv1.EndpointSlice) bool {
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return true
			}
		}
	}
	return false
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// Read fetches State from the cluster: reads only.
func Read(ctx context.Context, c client.Reader, w Want, release func() (string, error)) (*State, error) {
	s := &State{CRDs: map[string]*apiextensionsv1.CustomResourceDefinition{}, PullSecrets: map[string]*corev1.Secret{}}
	get := func(key client.ObjectKey, obj client.Object) (bool, error) {
		err := c.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
	ns := &corev1.Namespace{}
	if ok, err := get(client.ObjectKey{Name: w.Namespace}, ns); err != nil {
		return nil, err
	} else if ok {
		s.Namespace = ns
	}
	for name := range w.CRDs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if ok, err := get(client.ObjectKey{Name: name}, crd); err != nil {
			return nil, err
		} else if ok {
			s.CRDs[name] = crd
		}
	}
	if s.Namespace == nil {
		return s, nil
	}
	var err error
	if s.Release, err = release(); err != nil {
		return nil, err
	}
	in := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: w.Namespace, Name: name} }
	d, svc, sec := &appsv1.Deployment{}, &corev1.Service{}, &corev1.Secret{}
	v, m := &admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}
	for _, o := range []struct {
		key client.ObjectKey
		obj client.Object
		set func()
	}{
		{in(Deployment), d, func() { s.Deployment = d }},
		{in(WebhookService), svc, func() { s.Service = svc }},
		{in(CertSecret), sec, func() { s.CertSecret = sec }},
		{client.ObjectKey{Name: WebhookConfig}, v, func() { s.Validating = v }},
		{client.ObjectKey{Name: WebhookConfig}, m, func() { s.Mutating = m }},
	} {
		if ok, err := get(o.key, o.obj); err != nil {
			return nil, err
		} else if ok {
			o.set()
		}
	}
	if s.Service != nil {
		var l discoveryv1.EndpointSliceList
		if err := c.List(ctx, &l, client.InNamespace(w.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: WebhookService}); err != nil {
			return nil, err
		}
		s.Endpoints = l.Items
	}
	if s.Deployment != nil {
		for _, ref := range s.Deployment.Spec.Template.Spec.ImagePullSecrets {
			ps := &corev1.Secret{}
			if ok, err := get(in(ref.Name), ps); err != nil {
				return nil, err
			} else if ok {
				s.PullSecrets[ref.Name] = ps
			} else {
				s.PullSecrets[ref.Name] = nil
			}
		}
	}
	if !w.OnlyOperator {
		sgx, las := &basev1beta1.SGXPlugin{}, &basev1beta1.LAS{}
		if ok, err := get(client.ObjectKey{Name: DefaultSGXPlugin}, sgx); err != nil && !meta.IsNoMatchError(err) {
			return nil, err
		} else if ok {
			s.SGXPlugin = sgx
		}
		if ok, err := get(client.ObjectKey{Name: DefaultLAS}, las); err != nil && !meta.IsNoMatchError(err) {
			return nil, err
		} else if ok {
			s.LAS = las
		}
	}
	return s, nil
}

// Scheme knows what install reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, basev1beta1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
