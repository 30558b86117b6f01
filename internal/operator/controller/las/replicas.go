package las

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

// LabelVersion is the pod label carrying the LAS version.
const LabelVersion = "app.kubernetes.io/version"

// Replicas computes the LAS status fields from its DaemonSet (nil if it does
// not exist) and its pods, and judges IsHealthy by lasReplicaAlert: a LAS
// pod that fails its SGX-access probe is not ready and makes the CR
// UNHEALTHY (the "LAS Unhealthy" case).
func Replicas(ds *appsv1.DaemonSet, pods []corev1.Pod) (basev1beta1.LASStatus, health.Observation) {
	var st basev1beta1.LASStatus
	st.Nodes = map[string]basev1beta1.LASNode{}
	versions := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		ready := service.PodReady(p)
		v := p.Labels[LabelVersion]
		st.Nodes[p.Spec.NodeName] = basev1beta1.LASNode{Pod: p.Name, Ready: ready, Version: v}
		if ready && v != "" {
			versions[v] = true
		}
	}
	vs := make([]string, 0, len(versions))
	for v := range versions {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	st.Version = strings.Join(vs, ",")

	if ds == nil {
		st.DesiredNumberScheduled, st.NumberAvailable, st.LASReplicaAlert = -1, -1, -1
		return st, health.Obs(health.Unknown, health.ReasonLASNotDeployed, "the LAS DaemonSet does not exist yet")
	}
	st.DesiredNumberScheduled = ds.Status.DesiredNumberScheduled
	var notReady []string
	ready := int32(0)
	for node, n := range st.Nodes {
		if !n.Ready {
			notReady = append(notReady, node)
		} else {
			ready++
		}
	}
	// A pod's readiness reaches the operator before the DaemonSet
	// controller counts it: available is what both say, so the count
	// never claims a node the per-node map shows not ready.
	st.NumberAvailable = min(ds.Status.NumberAvailable, ready)
	slices.Sort(notReady)
	// Likewise the alert takes whichever says more.
	st.LASReplicaAlert = max(st.DesiredNumberScheduled-st.NumberAvailable, int32(len(notReady)), 0) //nolint:gosec // a count of pods, far below 2^31
	if st.LASReplicaAlert == 0 {
		return st, health.Obs(health.True, health.ReasonNoAlerts, fmt.Sprintf("LAS ready on %d nodes", st.NumberAvailable))
	}
	msg := fmt.Sprintf("lasReplicaAlert=%d: LAS is not ready on %d of %d nodes", st.LASReplicaAlert, st.LASReplicaAlert, st.DesiredNumberScheduled)
	if len(notReady) > 0 {
		msg += " (" + strings.Join(notReady, ", ") + "); if its SGX probe fails, check the permissions of /dev/sgx_enclave on the node (they must be 0666)"
	}
	return st, health.Obs(health.False, health.ReasonLASReplicaAlert, msg)
}
