// Package devices is the device accounting the device-plugin kinds
// (SGXPlugin, CEXPlugin) share: which nodes a plugin serves, how many
// devices they offer and pods use, the device and replica alerts, and the
// watches that keep those numbers current. A kind brings a Spec (which
// resources and nodes count) and Fields (where its status keeps them); the
// rest is here, pure where it can be (Count, Judge) and table-tested.
package devices

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Spec is what one device kind counts.
type Spec struct {
	// Requested says whether a resource is one of the kind's: pods asking
	// for it use a device, and the watches pass their events.
	Requested func(corev1.ResourceName) bool
	// Counted are the resources summed into capacity, used and available
	// (a subset of Requested: SGX counts enclaves, not provisioning keys).
	Counted func(corev1.ResourceName) bool
	// Serves says whether a selected node is one the plugin serves, given
	// what it offers of the counted resources.
	Serves func(n *corev1.Node, capacity int32) bool
	// Categories, when set, are alerted on one by one: a node is out of
	// devices when any category has none free. Otherwise a node is out
	// when no counted device is free.
	Categories []corev1.ResourceName
	// Noun names one device in messages, e.g. "SGX device".
	Noun string
	// NoNodes says, when no selected node is served, which nodes would be.
	NoNodes string
	// Reasons of IsHealthy when an alert is raised.
	DeviceAlert, ReplicaAlert health.Reason
	// Driver is the family's DRA driver; DRA says the CR's mode runs it,
	// which then owns the devices: they are counted from its
	// ResourceSlices and the claims allocated of them (CountDRA).
	Driver string
	DRA    bool
}

// Counts are the device numbers of a kind over the nodes it serves.
type Counts struct {
	Capacity, Used, Available                      int32
	CapacityPerNode, UsedPerNode, AvailablePerNode map[string]int32
	// Exhausted lists the nodes (with the category, if any) without a free
	// device: one entry per node, the device alert's value.
	Exhausted []string
}

// Count computes the device numbers from the selected nodes and the pods of
// the cluster.
func Count(spec Spec, nodes []corev1.Node, pods []corev1.Pod) Counts {
	used := UsedPerNode(pods, spec.Requested)
	c := Counts{CapacityPerNode: map[string]int32{}, UsedPerNode: map[string]int32{}, AvailablePerNode: map[string]int32{}}
	for i := range nodes {
		n := &nodes[i]
		var capacity, u int32
		for name := range n.Status.Allocatable {
			if spec.Counted(name) {
				capacity += Quantity(n.Status.Allocatable, name)
			}
		}
		if !spec.Serves(n, capacity) {
			continue
		}
		for name, v := range used[n.Name] {
			if spec.Counted(name) {
				u += v
			}
		}
		avail := max(capacity-u, 0)
		c.CapacityPerNode[n.Name], c.UsedPerNode[n.Name], c.AvailablePerNode[n.Name] = capacity, u, avail
		c.Capacity += capacity
		c.Used += u
		c.Available += avail
		if len(spec.Categories) == 0 && avail == 0 {
			c.Exhausted = append(c.Exhausted, n.Name)
		}
		for _, cat := range spec.Categories {
			if Quantity(n.Status.Allocatable, cat)-used[n.Name][cat] <= 0 {
				c.Exhausted = append(c.Exhausted, fmt.Sprintf("%s (%s)", n.Name, cat))
				break
			}
		}
	}
	slices.Sort(c.Exhausted)
	return c
}

// Replicas are the plugin DaemonSet's numbers; all -1 while it does not
// exist (they cannot be determined).
type Replicas struct {
	Desired, Ready, Alert int32
}

// ReplicasOf reads ds (nil when it does not exist).
func ReplicasOf(ds *appsv1.DaemonSet) Replicas {
	if ds == nil {
		return Replicas{-1, -1, -1}
	}
	st := ds.Status
	return Replicas{st.DesiredNumberScheduled, st.NumberReady, max(st.DesiredNumberScheduled-st.NumberReady, 0)}
}

// Judge says whether the plugin is healthy: unknown while it is not
// deployed, unhealthy on a device alert (first) or a replica alert. The
// message names the alert fields as the status shows them.
func Judge(spec Spec, f Fields, c Counts, r Replicas) health.Observation {
	if r.Desired < 0 {
		return health.Obs(health.Unknown, health.ReasonPluginNotDeployed, "the plugin's DaemonSet does not exist yet")
	}
	var problems []string
	if len(c.Exhausted) > 0 {
		problems = append(problems, fmt.Sprintf("%s=%d: no free %s on %s",
			f.DeviceAlert.Name, len(c.Exhausted), spec.Noun, strings.Join(c.Exhausted, ", ")))
	}
	if r.Alert > 0 {
		problems = append(problems, fmt.Sprintf("%s=%d: the plugin is not ready on %d of %d nodes",
			f.ReplicaAlert.Name, r.Alert, r.Alert, r.Desired))
	}
	switch {
	case len(c.Exhausted) > 0:
		return health.Obs(health.False, spec.DeviceAlert, strings.Join(problems, "; "))
	case r.Alert > 0:
		return health.Obs(health.False, spec.ReplicaAlert, strings.Join(problems, "; "))
	case len(c.CapacityPerNode) == 0:
		return health.Obs(health.True, health.ReasonNoNodes, spec.NoNodes+": nothing to serve")
	default:
		return health.Obs(health.True, health.ReasonNoAlerts, fmt.Sprintf("%d %ss available on %d nodes",
			c.Available, spec.Noun, len(c.CapacityPerNode)))
	}
}

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
			used[p.Spec.NodeName][name] += int32(min(q.Value(), 1<<31-1)) //nolint:gosec // clamped to MaxInt32 by min
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
	return int32(min(q.Value(), 1<<31-1)) //nolint:gosec // clamped to MaxInt32 by min
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
