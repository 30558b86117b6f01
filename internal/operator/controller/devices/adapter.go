package devices

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind is the half every device-plugin kind (SGXPlugin, CEXPlugin,
// NitroPlugin) shares with the others: its status and metrics from the
// shared device accounting, over what Of reads from one of its CRs of type
// T. A device-plugin kind embeds it and adds its name, its CR type and its
// release's values; a kind with more to its status overrides FillStatus
// or Metrics.
type Kind[T service.Object] struct {
	service.Base
	// Of is the CR's node selector, the devices it counts and where its
	// status keeps the numbers.
	Of func(T) (common.NodeSelector, Spec, Fields)
	// Extra, when set, adds to the CR's status what the kind keeps beside
	// the device numbers, from the same nodes and pods (none: a failed
	// read).
	Extra func(cr T, nodes []corev1.Node, pods []corev1.Pod)
}

var _ Plugin = (*Kind[service.Object])(nil)

// Devices is Of for the CR.
func (k *Kind[T]) Devices(obj service.Object) (common.NodeSelector, Spec, Fields) {
	return k.Of(obj.(T))
}

// FillStatus computes the device metrics and alerts.
func (k *Kind[T]) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	var extra func([]corev1.Node, []corev1.Pod)
	if k.Extra != nil {
		extra = func(nodes []corev1.Node, pods []corev1.Pod) { k.Extra(obj.(T), nodes, pods) }
	}
	return FillStatus(ctx, k.Reader, k, obj, oos, extra)
}

// Metrics exports every metric and alert field of the device accounting.
func (k *Kind[T]) Metrics(obj service.Object) []metrics.Sample {
	_, _, f := k.Of(obj.(T))
	return f.Samples()
}
