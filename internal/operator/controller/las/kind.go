// Package las is the LAS controller: the shared service reconciler with the
// local attestation service chart, and the replica status and alert
// (lasReplicaAlert).
package las

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind adapts LAS to the service reconciler.
type Kind struct {
	service.Base
	// Keys reads the LAS pods' simulation keys; nil: none are read.
	Keys *NodeKeys
}

var (
	_ service.Kind   = (*Kind)(nil)
	_ service.Poller = (*Kind)(nil)
)

// keyRetry is how soon a LAS pod's simulation key that could not be
// read is read again.
const keyRetry = 10 * time.Second

// PollAfter reads again soon while a LAS pod's simulation key is missing.
func (k *Kind) PollAfter(obj service.Object) time.Duration {
	if k.Keys != nil && as(obj).Spec.Simulation && k.Keys.Pending() {
		return keyRetry
	}
	return 0
}

func (k *Kind) Name() string                 { return "LAS" }
func (k *Kind) ReleasePrefix() string        { return "las" }
func (k *Kind) New() service.Object          { return &basev1beta1.LAS{} }
func as(obj service.Object) *basev1beta1.LAS { return obj.(*basev1beta1.LAS) }

// Release places LAS in spec.namespace (default: the operator's) on hostPort.
func (k *Kind) Release(obj service.Object, operatorNamespace string) (string, map[string]any, error) {
	l := as(obj)
	ns, values, err := service.NamespacedValues(&l.Spec.ServiceSpec, l.Spec.Namespace, operatorNamespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	values["hostPort"] = int64(l.Spec.HostPort)
	values["simulation"] = l.Spec.Simulation
	values["version"] = service.ImageTag(values["image"].(string))
	return ns, values, nil
}

// FillStatus computes the replica status from the DaemonSet and its pods.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	l := as(obj)
	ds := service.LiveDaemonSet(oos)
	var pods corev1.PodList
	if ds != nil {
		err := k.Reader.List(ctx, &pods, client.InNamespace(ds.Namespace), client.MatchingLabels{
			service.LabelOwnerKind: k.Name(), service.LabelOwnerName: l.Name})
		if err != nil {
			l.Status.DesiredNumberScheduled, l.Status.NumberAvailable, l.Status.LASReplicaAlert = -1, -1, -1
			return health.Obs(health.Unknown, health.ReasonReadError, "listing LAS pods: "+err.Error())
		}
	}
	st, healthy := Replicas(ds, pods.Items)
	st.ServiceStatus = l.Status.ServiceStatus
	if l.Spec.Simulation && k.Keys != nil {
		if missing := k.simulationKeys(ctx, pods.Items, int(l.Spec.HostPort), st.Nodes); missing != "" && healthy.Status == health.True {
			healthy.Message += "; " + missing
		}
	}
	if healthy.Status == health.True && l.Spec.Simulation {
		healthy.Message += " (simulated evidence: insecure, development only)"
	}
	if healthy.Status == health.False && k.Keys != nil {
		if reason, why := k.noEvidence(ctx, pods.Items, int(l.Spec.HostPort), st.Nodes); why != "" {
			healthy = health.Obs(health.False, reason, fmt.Sprintf("lasReplicaAlert=%d: %s", st.LASReplicaAlert, why))
		}
	}
	l.Status = st
	return healthy
}

// maxStatusReads bounds the LAS pods asked why they are not ready in one
// reconcile: each read may wait for its timeout.
const maxStatusReads = 5

// evidenceChecks are the LAS checks that mean a node's LAS cannot produce
// evidence at all, each with its condition reason and what to do.
var evidenceChecks = map[string]struct {
	reason health.Reason
	fix    string
}{
	laswire.CheckEvidence:             {health.ReasonLASNoEvidence, "for development, set spec.simulation: true (insecure)"},
	laswire.CheckAESMSocket:           {health.ReasonLASAESMUnreachable, "install and start Intel's aesmd (sgx-aesm-service) on the node"},
	laswire.CheckECDSAKey:             {health.ReasonLASNoECDSAKey, "install the DCAP quoting enclave (libsgx-dcap-ql, libsgx-aesm-ecdsa-plugin) beside aesmd"},
	laswire.CheckPlatformRegistration: {health.ReasonLASPlatformNotRegistered, "register the platform with Intel PCS and make the node's PCCS serve its PCK certificate"},
	laswire.CheckAESM:                 {health.ReasonLASAESMError, "see aesmd's log on the node"},
}

// noEvidence asks the not-ready LAS pods why, and names the nodes whose
// LAS cannot produce evidence at all, with the reason of the first one
// asked; "" if none.
func (k *Kind) noEvidence(ctx context.Context, pods []corev1.Pod, port int, nodes map[string]basev1beta1.LASNode) (health.Reason, string) {
	var names []string
	check, reason, reads := "", "", 0
	for i := range pods {
		p := &pods[i]
		if n, ok := nodes[p.Spec.NodeName]; !ok || n.Pod != p.Name || n.Ready || reads == maxStatusReads {
			continue
		}
		reads++
		st, err := k.Keys.Status(ctx, p, port)
		if _, known := evidenceChecks[st.Check]; err != nil || !known || (check != "" && st.Check != check) {
			continue
		}
		check = st.Check
		names, reason = append(names, p.Spec.NodeName), truncate(st.Reason, maxReason)
	}
	if len(names) == 0 {
		return "", ""
	}
	slices.Sort(names)
	c := evidenceChecks[check]
	return c.reason, fmt.Sprintf("LAS cannot produce evidence on %s: %s; %s", strings.Join(names, ", "), reason, c.fix)
}

// simulationKeys puts each ready pod's simulation key into nodes, and
// says which could not be read (simulated CASes refuse those nodes'
// workloads until they are).
func (k *Kind) simulationKeys(ctx context.Context, pods []corev1.Pod, port int, nodes map[string]basev1beta1.LASNode) string {
	live := map[types.UID]bool{}
	var missing []string
	for i := range pods {
		p := &pods[i]
		n, ok := nodes[p.Spec.NodeName]
		if !ok || n.Pod != p.Name || !n.Ready {
			continue
		}
		live[p.UID] = true
		key, err := k.Keys.Key(ctx, p, port)
		if errors.Is(err, ErrSimulatedNode) {
			continue
		}
		if err != nil {
			missing = append(missing, err.Error())
			continue
		}
		n.SimulationKey = key
		nodes[p.Spec.NodeName] = n
	}
	k.Keys.Forget(live)
	slices.Sort(missing)
	if len(missing) == 0 {
		return ""
	}
	return "simulated CASes take no evidence from these nodes yet: " + strings.Join(missing, "; ")
}

// Metrics exports every metric and alert field.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	s := as(obj).Status
	out := []metrics.Sample{
		{Field: "desiredNumberScheduled", Value: float64(s.DesiredNumberScheduled)},
		{Field: "numberAvailable", Value: float64(s.NumberAvailable)},
		{Field: "lasReplicaAlert", Value: float64(s.LASReplicaAlert)},
	}
	for node, n := range s.Nodes {
		v := 0.0
		if n.Ready {
			v = 1
		}
		out = append(out, metrics.Sample{Field: "numberAvailable", Node: node, Value: v})
	}
	return out
}

// maxReason bounds the text a LAS pod (on a node whose root is not
// trusted) puts into the LAS resource's status.
const maxReason = 300

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
