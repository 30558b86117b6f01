package service

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// requests counts the API requests a client makes, by "METHOD path".
type requests struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *requests) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(req *http.Request) (*http.Response, error) {
			r.mu.Lock()
			r.counts[req.Method+" "+req.URL.Path]++
			r.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (r *requests) count(method, path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[method+" "+path]
}

// writes is every request but reads and watches.
func (r *requests) writes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, v := range r.counts {
		if !strings.HasPrefix(k, "GET ") {
			n += v
		}
	}
	return n
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Under the real manager, with its cache lagging behind its own writes, a
// new CR (beside those the other tests left) goes to HEALTHY with each state change announced once and each
// action taken once, and an idle CR costs no further writes.
func TestEachTransitionAndActionOnce(t *testing.T) {
	const ns = "once"
	s := scheme(t)
	reqs := &requests{counts: map[string]int{}}
	cfg := reqs.wrap(envConfig)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	rm, err := release.NewManager(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r := &Reconciler{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: s, Releases: rm, Recorder: rec,
		Metrics: metrics.NewRecorder(prometheus.NewRegistry()),
		Kind:    &testKind{Base{ChartData: testChart()}}, OperatorNamespace: ns,
	}
	var passes atomic.Int64
	// Only this test's CR: the CRs other tests left behind are in the
	// cache too, and their passes would write while this one is idle.
	counting := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if req.Name != "once" {
			return reconcile.Result{}, nil
		}
		passes.Add(1)
		return r.Reconcile(ctx, req)
	})
	err = NewControllerManagedBy(mgr, "once", &basev1beta1.LAS{}).
		Owns(&corev1.ConfigMap{}).Owns(&corev1.ServiceAccount{}).Complete(counting)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	c, err := client.New(envConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	cr := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: "once"}}
	if err := c.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for cr.Status.State != "HEALTHY" {
		if time.Now().After(deadline) {
			t.Fatalf("not HEALTHY after a minute: %+v", cr.Status)
		}
		time.Sleep(50 * time.Millisecond)
		if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
			t.Fatal(err)
		}
	}
	// Let any reconcile that the last writes cause run out.
	time.Sleep(3 * time.Second)
	idleFrom := reqs.writes()

	for _, reason := range []health.Reason{health.EventPending, health.EventInstalled, health.EventHealthy} {
		if n := rec.countOf(cr.Name, reason); n != 1 {
			t.Errorf("%d %s events, want exactly one; all: %v", n, reason, rec.take())
		}
	}
	if n := reqs.count(http.MethodPatch, "/apis/base.cloister.dev/v1beta1/las/once"); n != 1 {
		t.Errorf("finalizer added with %d patches, want one", n)
	}
	time.Sleep(3 * time.Second)
	if n := reqs.writes() - idleFrom; n != 0 {
		t.Errorf("%d writes while idle, want none: %v", n, reqs.counts)
	}

	// A write of the status alone (the reconciler's own, or anyone's)
	// wakes no reconcile: it would only judge the same world again.
	idlePasses := passes.Load()
	if err := c.Status().Patch(ctx, cr, client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":0}}`))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if n := passes.Load() - idlePasses; n != 0 {
		t.Errorf("%d reconciles after a status-only write, want none", n)
	}
}

// staleClient serves Get of one object from a copy read earlier, as the
// manager's cache does until its watch delivers the reconciler's own last
// writes; everything else reaches the API server.
type staleClient struct {
	client.Client
	stale client.Object
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key == client.ObjectKeyFromObject(c.stale) {
		c.stale.(*basev1beta1.LAS).DeepCopyInto(obj.(*basev1beta1.LAS))
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A pass that reads the CR from before the previous pass's writes neither
// announces the state again nor repeats the action: its writes are
// refused as conflicts and it looks again later.
func TestStaleReadActsOnce(t *testing.T) {
	f := newFixture(t, "stale")
	reqs := &requests{counts: map[string]int{}}
	counted, err := client.New(reqs.wrap(envConfig), client.Options{Scheme: f.r.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cr := f.newCR("stale")
	before := cr.DeepCopy()
	f.reconcile(cr) // writes PENDING, adds the finalizer
	if got := f.events.take(); len(got) != 1 {
		t.Fatalf("first pass: events %v, want the state change", got)
	}

	f.r.Client = staleClient{Client: counted, stale: before}
	res, err := f.r.Reconcile(f.ctx, reqFor(cr))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.events.take(); len(got) != 0 {
		t.Errorf("a stale pass emitted %v, want nothing", got)
	}
	if n := reqs.count(http.MethodPatch, "/apis/base.cloister.dev/v1beta1/las/stale"); n != 0 {
		t.Errorf("a stale pass patched the CR %d times, want none (the finalizer is there)", n)
	}
	if res.RequeueAfter == 0 {
		t.Error("a stale pass did not ask to look again")
	}
	f.get(cr)
	if cr.Status.State != "PENDING" || len(cr.Finalizers) != 1 {
		t.Errorf("state %s finalizers %v after the stale pass", cr.Status.State, cr.Finalizers)
	}
}
