package confidentialruntime

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// LabelMode on an installer pod says what it does: install or remove (the
// chart sets it).
const (
	LabelMode     = "cloister.dev/runtime-mode"
	ModeRemove    = "remove"
	containerName = "installer"
)

// Nodes computes the status fields from the installer DaemonSet (nil if it
// does not exist) and its pods, and judges IsHealthy by
// runtimeInstallAlert: a node whose installer failed makes the CR
// UNHEALTHY with the installer's reason.
func Nodes(ds *appsv1.DaemonSet, pods []corev1.Pod) (basev1beta1.ConfidentialRuntimeStatus, health.Observation) {
	var st basev1beta1.ConfidentialRuntimeStatus
	st.Nodes = map[string]basev1beta1.RuntimeNode{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		st.Nodes[p.Spec.NodeName] = node(p)
	}
	if ds == nil {
		st.DesiredNumberScheduled, st.NumberInstalled, st.RuntimeInstallAlert = -1, -1, -1
		return st, health.Obs(health.Unknown, health.ReasonRuntimeNotDeployed, "the node installer DaemonSet does not exist yet")
	}
	var failed, installing []string
	for name, n := range st.Nodes {
		switch n.State {
		case basev1beta1.RuntimeNodeInstalled:
			st.NumberInstalled++
		case basev1beta1.RuntimeNodeFailed:
			failed = append(failed, name+": "+n.Message)
		default:
			installing = append(installing, name)
		}
	}
	slices.Sort(failed)
	slices.Sort(installing)
	st.DesiredNumberScheduled = ds.Status.DesiredNumberScheduled
	st.RuntimeInstallAlert = max(st.DesiredNumberScheduled-st.NumberInstalled, int32(len(failed)), 0) //nolint:gosec // a count of nodes, far below 2^31
	switch {
	case st.DesiredNumberScheduled == 0 && len(st.Nodes) == 0:
		return st, health.Obs(health.True, health.ReasonNoNodes, "no node matches the nodeSelector: nothing to install")
	case len(failed) > 0:
		return st, health.Obs(health.False, health.ReasonRuntimeInstallFailed,
			fmt.Sprintf("runtimeInstallAlert=%d: the handler could not be installed on %d nodes: %s", st.RuntimeInstallAlert, len(failed), strings.Join(failed, "; ")))
	case st.RuntimeInstallAlert > 0:
		msg := fmt.Sprintf("installing on %d of %d nodes", st.RuntimeInstallAlert, st.DesiredNumberScheduled)
		if len(installing) > 0 {
			msg += " (" + strings.Join(installing, ", ") + ")"
		}
		return st, health.Obs(health.Unknown, health.ReasonRuntimeInstalling, msg)
	}
	return st, health.Obs(health.True, health.ReasonNoAlerts, fmt.Sprintf("installed on %d nodes", st.NumberInstalled))
}

// node is one node's state from its installer pod.
func node(p *corev1.Pod) basev1beta1.RuntimeNode {
	n := basev1beta1.RuntimeNode{Pod: p.Name, State: basev1beta1.RuntimeNodeInstalling}
	if p.Labels[LabelMode] == ModeRemove {
		n.State = basev1beta1.RuntimeNodeRemoving
	}
	if service.PodReady(p) {
		if n.State == basev1beta1.RuntimeNodeInstalling {
			n.State = basev1beta1.RuntimeNodeInstalled
		}
		return n
	}
	if msg := failure(p); msg != "" {
		n.State, n.Message = basev1beta1.RuntimeNodeFailed, msg
	}
	return n
}

// failure is why the installer last ended, when it failed.
func failure(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name != containerName {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
			if t != nil && t.ExitCode != 0 {
				return strings.TrimSpace(t.Message)
			}
		}
	}
	return ""
}

// Removed judges a removal rollout: done once the DaemonSet has rolled
// every node to removal mode and each of those installers is ready.
func Removed(ds *appsv1.DaemonSet, pods []corev1.Pod) (service.DrainState, string) {
	var waiting []string
	removed := int32(0)
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		n := node(p)
		switch {
		case n.State == basev1beta1.RuntimeNodeRemoving && service.PodReady(p):
			removed++
		case n.State == basev1beta1.RuntimeNodeFailed:
			waiting = append(waiting, p.Spec.NodeName+" ("+n.Message+")")
		default:
			waiting = append(waiting, p.Spec.NodeName)
		}
	}
	if removed >= ds.Status.DesiredNumberScheduled && len(waiting) == 0 {
		return service.Drained, fmt.Sprintf("the handler is out of %d nodes", removed)
	}
	slices.Sort(waiting)
	if len(waiting) == 0 {
		return service.Draining, fmt.Sprintf("the handler is out of %d of %d nodes", removed, ds.Status.DesiredNumberScheduled)
	}
	return service.Draining, "removing the handler from " + strings.Join(waiting, ", ")
}
