package clusterdns

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// Watched is a Source of the API server's Services and EndpointSlices,
// watched (read from a cache, never one request per query).
type Watched struct {
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
}

// Watch starts watching through cs until ctx ends and returns once the
// caches hold the cluster's current state: a name is not refused while
// the cache is empty.
func Watch(ctx context.Context, cs kubernetes.Interface) (*Watched, error) {
	f := informers.NewSharedInformerFactory(cs, 0)
	w := &Watched{services: f.Core().V1().Services().Lister(), slices: f.Discovery().V1().EndpointSlices().Lister()}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("reading the cluster's %v: %w", typ, ctx.Err())
		}
	}
	return w, nil
}

// Service implements Source.
func (w *Watched) Service(namespace, name string) (*corev1.Service, error) {
	s, err := w.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, ErrNotFound
	}
	return s, err
}

// EndpointSlices implements Source.
func (w *Watched) EndpointSlices(namespace, service string) ([]*discoveryv1.EndpointSlice, error) {
	return w.slices.EndpointSlices(namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service}))
}
