// Package controllertest builds what the controllers' tests share against
// envtest's API server: a client for the kinds a test needs, a namespace of
// its own and a Helm release manager (Env), and the custom resources of
// each kind, cert-manager style: a builder with the defaults a test starts
// from and options that change one thing. It does not import the shared
// reconciler, so that package's own tests can use it too.
package controllertest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// Env is one test's share of the API server.
type Env struct {
	T         testing.TB
	Ctx       context.Context
	Scheme    *runtime.Scheme
	Client    client.Client
	Releases  *release.Manager
	Events    *testenv.Events
	Namespace string
}

// New makes a client for core and the kinds adders register, the
// namespace ns, and a release manager.
func New(tb testing.TB, cfg *rest.Config, ns string, adders ...func(*runtime.Scheme) error) *Env {
	tb.Helper()
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{corev1.AddToScheme}, adders...) {
		if err := add(s); err != nil {
			tb.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		tb.Fatal(err)
	}
	rm, err := release.NewManager(cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	rm.SetRecordNamespace(ns)
	return &Env{T: tb, Ctx: ctx, Scheme: s, Client: c, Releases: rm, Events: &testenv.Events{}, Namespace: ns}
}

// Reconcile runs passes of r for obj and returns the last error.
func (e *Env) Reconcile(r reconcile.Reconciler, obj client.Object, passes int) error {
	var err error
	for range passes {
		_, err = r.Reconcile(e.Ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	}
	return err
}
