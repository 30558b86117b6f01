package service

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/controller/controllertest"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// A real kube-apiserver and etcd with Cloister's CRDs, shared by the
// package's envtest tests.
var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// testChart renders two objects from the CR: a ConfigMap carrying the
// image value (so a spec change or an edit shows as a difference) and a
// ServiceAccount. Neither needs a controller to be healthy.
func testChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "test", Version: "0.1.0"},
		Templates: []*chartcommon.File{
			{Name: "templates/configmap.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
data:
  image: {{ .Values.image | quote }}
`)},
			{Name: "templates/serviceaccount.yaml", Data: []byte(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
`)},
		},
	}
}

// testKind serves the LAS CRD with the test chart and is always healthy
// itself: these tests are about the shared reconciler, not a kind.
type testKind struct{ Base }

func (k *testKind) Name() string          { return "TestService" }
func (k *testKind) ReleasePrefix() string { return "test" }
func (k *testKind) New() Object           { return &basev1beta1.LAS{} }
func (k *testKind) Release(obj Object, operatorNamespace string) (string, map[string]any, error) {
	l := obj.(*basev1beta1.LAS)
	return NamespacedValues(&l.Spec.ServiceSpec, l.Spec.Namespace, operatorNamespace, "example.com/test:1")
}
func (k *testKind) FillStatus(context.Context, Object, []Owned) health.Observation {
	return health.Obs(health.True, health.ReasonNoAlerts, "")
}
func (k *testKind) Metrics(Object) []metrics.Sample { return nil }

// recorder keeps the events of the reconciler in order.
type recorder struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct{ object, typ, reason string }

var _ events.EventRecorder = (*recorder)(nil)

func (r *recorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recorded{regarding.(client.Object).GetName(), eventtype, reason})
}

// take returns the events since the last take, as "Type Reason".
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.typ+" "+e.reason)
	}
	r.events = nil
	return out
}

// countOf is how many events about object have reason.
func (r *recorder) countOf(object string, reason health.Reason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.object == object && e.reason == string(reason) {
			n++
		}
	}
	return n
}

// fixture is one reconciler on the shared API server, with its own
// namespace, a clock the test moves and the events it emitted.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	client   client.Client
	releases *release.Manager
	events   *recorder
	clock    *clocktesting.FakePassiveClock
	r        *Reconciler
	ns       string
}

func scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, basev1beta1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func newFixture(t *testing.T, ns string) *fixture {
	t.Helper()
	e := controllertest.New(t, envConfig, ns, basev1beta1.AddToScheme)
	s, c, ctx, rm := e.Scheme, e.Client, e.Ctx, e.Releases
	f := &fixture{t: t, ctx: ctx, client: c, releases: rm, events: &recorder{},
		clock: clocktesting.NewFakePassiveClock(time.Now()), ns: ns}
	f.r = &Reconciler{
		Client: c, Reader: c, Scheme: s, Releases: rm, Recorder: f.events,
		Metrics: metrics.NewRecorder(prometheus.NewRegistry()),
		Kind:    &testKind{Base{ChartData: testChart()}}, OperatorNamespace: ns, Clock: f.clock,
	}
	return f
}

// newCR creates a CR whose release goes to the fixture's namespace.
func (f *fixture) newCR(name string) *basev1beta1.LAS {
	f.t.Helper()
	cr := controllertest.LAS(name)
	if err := f.client.Create(f.ctx, cr); err != nil {
		f.t.Fatal(err)
	}
	return cr
}

// reconcile runs one pass for cr and fails the test on an error.
func (f *fixture) reconcile(cr client.Object) {
	f.t.Helper()
	if _, err := f.r.Reconcile(f.ctx, reqFor(cr)); err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
}

func reqFor(cr client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)}
}

// converge reconciles until cr is HEALTHY and nothing is left to do, then
// forgets the events on the way.
func (f *fixture) converge(cr *basev1beta1.LAS) {
	f.t.Helper()
	for range 10 {
		res, err := f.r.Reconcile(f.ctx, reqFor(cr))
		if err != nil {
			f.t.Fatalf("reconcile: %v", err)
		}
		f.get(cr)
		if res.IsZero() && cr.Status.State == "HEALTHY" {
			f.events.take()
			return
		}
	}
	f.t.Fatalf("%s did not become HEALTHY: %+v", cr.Name, cr.Status)
}

func (f *fixture) get(obj client.Object) {
	f.t.Helper()
	if err := f.client.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		f.t.Fatal(err)
	}
}

// owned is the CR's ConfigMap as it is now, nil when missing.
func (f *fixture) owned(cr *basev1beta1.LAS) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	err := f.client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "test-" + cr.Name}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return cm
}

// condition is the CR's condition of type t (an owned object's when id
// is set), failing the test when absent.
func condition(t *testing.T, cr *basev1beta1.LAS, id string, ct health.ConditionType) metav1.Condition {
	t.Helper()
	name := string(ct)
	if id != "" {
		name = health.OOConditionType(id, ct)
	}
	i := slices.IndexFunc(cr.Status.Conditions, func(c metav1.Condition) bool { return c.Type == name })
	if i < 0 {
		t.Fatalf("no condition %s in %v", name, cr.Status.Conditions)
	}
	return cr.Status.Conditions[i]
}

func configMapID(cr *basev1beta1.LAS) string {
	return health.ObjectID("", "ConfigMap", "test-"+cr.Name)
}

func mustPatch(t *testing.T, c client.Client, obj client.Object, patch string) {
	t.Helper()
	if err := c.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("patching %s with %s: %v", obj.GetName(), patch, err)
	}
}

func ownerUIDs(obj client.Object) []string {
	var uids []string
	for _, o := range obj.GetOwnerReferences() {
		uids = append(uids, fmt.Sprintf("%s/%s", o.Name, o.UID))
	}
	return uids
}
