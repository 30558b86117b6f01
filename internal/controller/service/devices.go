package service

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/metrics"
)

// UsedPerNode sums, per node and resource, the devices requested by the
// non-terminated pods bound to nodes (init containers and overhead counted
// as the scheduler counts them), for the resources match accepts.
func UsedPerNode(pods []corev1.Pod, match func(corev1.ResourceName) bool) map[string]map[corev1.ResourceName]int32 {
	used := map[string]map[corev1.ResourceName]int32{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			if !match(name) || q.IsZero() {
				continue
			}
			if used[p.Spec.NodeName] == nil {
				used[p.Spec.NodeName] = map[corev1.ResourceName]int32{}
			}
			used[p.Spec.NodeName][name] += int32(min(q.Value(), 1<<31-1))
		}
	}
	return used
}

// Quantity is a resource's count in list, 0 when absent.
func Quantity(list corev1.ResourceList, name corev1.ResourceName) int32 {
	q, ok := list[name]
	if !ok {
		return 0
	}
	return int32(min(q.Value(), 1<<31-1))
}

// RequestsAny reports whether any container of p requests or limits a
// resource match accepts.
func RequestsAny(p *corev1.Pod, match func(corev1.ResourceName) bool) bool {
	for _, list := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range list {
			for name := range c.Resources.Requests {
				if match(name) {
					return true
				}
			}
			for name := range c.Resources.Limits {
				if match(name) {
					return true
				}
			}
		}
	}
	return false
}

// DeviceSamples are the metrics of a device plugin kind: its totals, and
// each per-node map (field -> node -> value) as samples labelled by node.
func DeviceSamples(totals []metrics.Sample, perNode map[string]map[string]int32) []metrics.Sample {
	out := totals
	for field, nodes := range perNode {
		for node, v := range nodes {
			out = append(out, metrics.Sample{Field: field, Node: node, Value: float64(v)})
		}
	}
	return out
}

// NodesAndPods reads the nodes a device plugin serves (those matching its
// node selector) and every pod, whose requests are the devices in use.
func (b *Base) NodesAndPods(ctx context.Context, selector common.NodeSelector) ([]corev1.Node, []corev1.Pod, error) {
	var nodes corev1.NodeList
	if err := b.Reader.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(selector.Map())}); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	var pods corev1.PodList
	if err := b.Reader.List(ctx, &pods); err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	return nodes.Items, pods.Items, nil
}
