package plugin

import (
	"context"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// OfferNone is a mode that offers no device: during a migration to DRA
// the family's DRA driver owns the devices, and the plugin keeps serving
// only the containers that hold some through it already (their
// pre-start and release). Its resources stay registered, with no device,
// so the kubelet shows zero and schedules no new pod through them.
func OfferNone(m Mode) Mode { return offerNone{m} }

type offerNone struct{ m Mode }

var (
	_ Watcher    = offerNone{}
	_ PreStarter = offerNone{}
	_ Releaser   = offerNone{}
)

// Scan scans (a mode's scan also labels its node) and offers nothing.
func (o offerNone) Scan(ctx context.Context) (Inventory, error) {
	inv, err := o.m.Scan(ctx)
	if err != nil {
		return nil, err
	}
	for name := range inv {
		inv[name] = nil
	}
	return inv, nil
}

func (o offerNone) Allocate(ctx context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	return o.m.Allocate(ctx, resource, ids)
}

func (o offerNone) WatchPaths() []string {
	if w, ok := o.m.(Watcher); ok {
		return w.WatchPaths()
	}
	return nil
}

func (o offerNone) PreStart(ctx context.Context, resource string, ids []string) error {
	if p, ok := o.m.(PreStarter); ok {
		return p.PreStart(ctx, resource, ids)
	}
	return nil
}

func (o offerNone) Release(ctx context.Context, inUse map[string][]string) error {
	if r, ok := o.m.(Releaser); ok {
		return r.Release(ctx, inUse)
	}
	return nil
}
