package devices

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Plugin is what a device-plugin kind tells the shared code about one of
// its CRs.
type Plugin interface {
	// Devices are the CR's node selector, what it counts and where its
	// status keeps the numbers.
	Devices(obj service.Object) (common.NodeSelector, Spec, Fields)
}

// FillStatus reads the nodes and pods a plugin serves and computes its
// device metrics and alerts; extra, when set, adds what the kind keeps
// beside them from the same nodes and pods (none, after a failed read).
func FillStatus(ctx context.Context, r client.Reader, p Plugin, obj service.Object, oos []service.Owned, extra func(nodes []corev1.Node, pods []corev1.Pod)) health.Observation {
	selector, spec, fields := p.Devices(obj)
	nodes, pods, err := NodesAndPods(ctx, r, selector)
	if err != nil {
		fields.Unknown()
		if extra != nil {
			extra(nil, nil)
		}
		return health.Obs(health.Unknown, health.ReasonReadError, err.Error())
	}
	var obs health.Observation
	if spec.DRA {
		slices, claims, err := SlicesAndClaims(ctx, r)
		if err != nil {
			fields.Unknown()
			if extra != nil {
				extra(nil, nil)
			}
			return health.Obs(health.Unknown, health.ReasonReadError, err.Error())
		}
		c, rep := CountDRA(spec.Driver, nodes, slices, claims), ReplicasOf(service.LiveDaemonSet(oos))
		fields.Fill(c, rep)
		obs = Judge(spec, fields, c, rep)
	} else {
		obs = Status(spec, fields, nodes, pods, service.LiveDaemonSet(oos))
	}
	if extra != nil {
		extra(nodes, pods)
	}
	return obs
}

// Status is FillStatus on what was read: pure, for tests and kinds.
func Status(spec Spec, fields Fields, nodes []corev1.Node, pods []corev1.Pod, ds *appsv1.DaemonSet) health.Observation {
	c, r := Count(spec, nodes, pods), ReplicasOf(ds)
	fields.Fill(c, r)
	return Judge(spec, fields, c, r)
}

// NodesAndPods reads the nodes a device plugin serves (those matching its
// node selector) and every pod, whose requests are the devices in use.
func NodesAndPods(ctx context.Context, r client.Reader, selector common.NodeSelector) ([]corev1.Node, []corev1.Pod, error) {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(selector.Map())}); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods); err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	return nodes.Items, pods.Items, nil
}
