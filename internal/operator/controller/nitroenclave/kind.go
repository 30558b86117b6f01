// Package nitroenclave is the NitroEnclaveDeployment controller: the
// shared service reconciler with the enclave pods' chart (a Deployment of
// cloister-enclave pods on Nitro nodes and the enclave manifest in a
// ConfigMap), the STATUS (SCHEDULED, ERROR) and READY columns, the scale
// subresource's fields, and events naming what an unhealthy enclave
// reports.
package nitroenclave

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind adapts NitroEnclaveDeployment to the service reconciler.
type Kind struct {
	service.Base
	// Events reads the kubelet's events past the cache (their probe
	// output says why an enclave is unhealthy); nil reads none.
	Events client.Reader
}

var (
	_ service.Kind                = (*Kind)(nil)
	_ service.ReleaseStatusFiller = (*Kind)(nil)
	_ service.Poller              = (*Kind)(nil)
	_ service.Announcer           = (*Kind)(nil)
)

func (k *Kind) Name() string { return "NitroEnclaveDeployment" }

func (k *Kind) ReleasePrefix() string { return "ned" }
func (k *Kind) New() service.Object   { return &enclavev1beta1.NitroEnclaveDeployment{} }
func as(obj service.Object) *enclavev1beta1.NitroEnclaveDeployment {
	return obj.(*enclavev1beta1.NitroEnclaveDeployment)
}

// Release places the enclave pods in the CR's namespace, with the
// manifest derived from its spec.
func (k *Kind) Release(obj service.Object, _ string) (string, map[string]any, error) {
	n := as(obj)
	m, err := manifest.FromSpec(&n.Spec)
	if err != nil {
		return "", nil, err
	}
	values, err := service.CommonValues(&n.Spec.ServiceSpec, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	selector := n.Spec.NodeSelector.Map()
	if selector == nil {
		selector = map[string]string{}
	}
	selector[tee.LabelNitro] = "true"
	res := Resources(n.Spec.Resources, m.Enclave, n.Spec.Simulation, !n.Spec.Simulation && k.offersEnclaveCPUs())
	for key, v := range map[string]any{"nodeSelector": selector, "resources": res, "ports": ContainerPorts(m)} {
		if values[key], err = service.Plain(v); err != nil {
			return "", nil, fmt.Errorf("encoding %s: %w", key, err)
		}
	}
	values["replicas"] = int64(desired(&n.Spec))
	values["simulation"] = n.Spec.Simulation
	values["manifest"] = string(m.JSON())
	values["manifestSignature"] = n.Spec.ManifestSignature
	values["manifestKey"] = n.Spec.ManifestKey
	values["bootDigest"] = m.BootDigest()
	values["version"] = service.ImageTag(values["image"].(string))
	return n.Namespace, values, nil
}

// offersEnclaveCPUs says whether the Nitro device plugin offers enclave
// CPUs (nitro_enclaves_cpus) on some Nitro node: then the pods request
// theirs, and the scheduler counts them.
func (k *Kind) offersEnclaveCPUs() bool {
	var nodes corev1.NodeList
	if k.Reader == nil || k.Reader.List(context.Background(), &nodes, client.MatchingLabels{tee.LabelNitro: "true"}) != nil {
		return false
	}
	return slices.ContainsFunc(nodes.Items, offersCPUs)
}

func offersCPUs(n corev1.Node) bool {
	q, ok := n.Status.Allocatable[tee.NitroCPUs]
	return ok && !q.IsZero()
}

// The enclave pod's memory when the spec gives none: the supervisor's
// own; a simulated enclave's plugins run in the pod and get the enclave's
// memory besides.
var (
	supervisorMemoryRequest = resource.MustParse("64Mi")
	supervisorMemoryLimit   = resource.MustParse("128Mi")
)

// Resources are the enclave pod's: the spec's, for the supervisor, plus
// the enclave's own: one enclave device; on Nitro its memory as 2 MiB
// hugepages (as AWS's EKS guide sets them up) and, when offered, its
// CPUs. Kubernetes wants hugepages and extended resources requested as
// limited.
func Resources(user corev1.ResourceRequirements, size manifest.Size, simulation, cpus bool) corev1.ResourceRequirements {
	r := *user.DeepCopy()
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	_, req := r.Requests[corev1.ResourceMemory]
	_, lim := r.Limits[corev1.ResourceMemory]
	if !req && !lim {
		r.Requests[corev1.ResourceMemory] = supervisorMemoryRequest
		limit := supervisorMemoryLimit.DeepCopy()
		if simulation {
			limit.Add(*resource.NewQuantity(int64(size.MemoryMiB)<<20, resource.BinarySI))
		}
		r.Limits[corev1.ResourceMemory] = limit
	}
	both := func(name corev1.ResourceName, q resource.Quantity) {
		r.Requests[name], r.Limits[name] = q, q
	}
	both(tee.NitroEnclaves, *resource.NewQuantity(1, resource.DecimalSI))
	if !simulation {
		mib := (int64(size.MemoryMiB) + 1) &^ 1 // whole 2 MiB pages
		both(corev1.ResourceHugePagesPrefix+"2Mi", *resource.NewQuantity(mib<<20, resource.BinarySI))
	}
	if cpus {
		both(tee.NitroCPUs, *resource.NewQuantity(int64(size.CPUs), resource.DecimalSI))
	}
	return r
}

// ContainerPorts are the plugins' ports, as the enclave pod's.
func ContainerPorts(m *manifest.Manifest) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, p := range m.Plugins {
		for _, port := range p.Ports {
			out = append(out, corev1.ContainerPort{Name: port.Name, ContainerPort: port.Port, Protocol: corev1.Protocol(port.Protocol)})
		}
	}
	return out
}

// FillStatus computes READY and the scale fields from the Deployment and
// its pods; an unready pod's last readiness probe failure says why.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	n := as(obj)
	dep := service.LiveDeployment(oos)
	var pods Pods
	if dep != nil {
		var list corev1.PodList
		err := k.Reader.List(ctx, &list, client.InNamespace(n.Namespace), client.MatchingLabels{
			service.LabelOwnerKind: k.Name(), service.LabelOwnerName: n.Name})
		if err != nil {
			return health.Obs(health.Unknown, health.ReasonReadError, "listing the enclave pods: "+err.Error())
		}
		pods = Pods{Items: list.Items, ProbeFailures: k.probeFailures(ctx, list.Items)}
	}
	st, obs := Replicas(&n.Spec, dep, pods)
	st.ServiceStatus, st.Status = n.Status.ServiceStatus, n.Status.Status
	if m, err := manifest.FromSpec(&n.Spec); err == nil {
		st.Manifest = m.ManifestDigest()
		st.PCRs = PCRs(&n.Spec, m, st.ReadyReplicas)
	}
	n.Status = st
	return obs
}

// FillReleaseStatus sets STATUS.
func (k *Kind) FillReleaseStatus(obj service.Object, oos []service.Owned, failed health.Observation) {
	n := as(obj)
	n.Status.Status = DeploymentStatus(n.Status.Status, service.LiveDeployment(oos) != nil, failed)
}

// Announce emits an event when STATUS changed, and when the enclave pods
// report a new problem (what their readiness probe printed).
func (k *Kind) Announce(rec events.EventRecorder, before, now service.Object) {
	was, is := as(before), as(now)
	switch is.Status.Status {
	case was.Status.Status:
	case enclavev1beta1.DeploymentError:
		why := "see the ReleaseFailed condition"
		if c := conditionOf(is, health.ReleaseFailed); c != nil && c.Status == metav1.ConditionTrue {
			why = c.Message
		}
		rec.Eventf(is, nil, corev1.EventTypeWarning, string(health.EventDeploymentFailed), "Schedule",
			"the enclave pods' Deployment could not be created: %s", why)
	case enclavev1beta1.DeploymentScheduled:
		rec.Eventf(is, nil, corev1.EventTypeNormal, string(health.EventScheduled), "Schedule",
			"Deployment %s/%s-%s schedules the enclave pods", is.Namespace, k.ReleasePrefix(), is.Name)
	}
	h := conditionOf(is, health.IsHealthy)
	if h != nil && h.Reason == string(health.ReasonEnclavesNotReady) {
		if prev := conditionOf(was, health.IsHealthy); prev == nil || prev.Message != h.Message {
			rec.Eventf(is, nil, corev1.EventTypeWarning, string(health.EventEnclaveUnhealthy), "Check", "%s", h.Message)
		}
	}
}

// PollAfter looks again while enclave pods are unready: the kubelet's
// probe events, which say why, are not watched.
func (k *Kind) PollAfter(obj service.Object) time.Duration {
	n := as(obj)
	if n.Status.Status == enclavev1beta1.DeploymentScheduled && n.Status.ReadyReplicas < desired(&n.Spec) {
		return unreadyPoll
	}
	return 0
}

// unreadyPoll paces the looks at unready enclave pods.
const unreadyPoll = 5 * time.Second

func conditionOf(n *enclavev1beta1.NitroEnclaveDeployment, t health.ConditionType) *metav1.Condition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == string(t) {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// readinessFailed starts the kubelet's event message for a failed
// readiness probe; the rest is what the probe printed.
const readinessFailed = "Readiness probe failed: "

// probeFailures reads, for each running but unready pod, what its last
// failed readiness probe printed.
func (k *Kind) probeFailures(ctx context.Context, pods []corev1.Pod) map[string]string {
	if k.Events == nil {
		return nil
	}
	out := map[string]string{}
	for i := range pods {
		p := &pods[i]
		if service.PodReady(p) || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		var list corev1.EventList
		err := k.Events.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingFieldsSelector{Selector: fields.SelectorFromSet(fields.Set{
			"involvedObject.uid": string(p.UID), "reason": "Unhealthy"})})
		if err != nil {
			continue
		}
		var newest *corev1.Event
		for j := range list.Items {
			e := &list.Items[j]
			if strings.HasPrefix(e.Message, readinessFailed) && (newest == nil || lastSeen(e).After(lastSeen(newest))) {
				newest = e
			}
		}
		if newest != nil {
			out[p.Name] = strings.TrimSpace(strings.TrimPrefix(newest.Message, readinessFailed))
		}
	}
	return out
}

func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

// Metrics exports the replica counts.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	s := as(obj).Status
	return []metrics.Sample{
		{Field: "replicas", Value: float64(s.Replicas)},
		{Field: "readyReplicas", Value: float64(s.ReadyReplicas)},
	}
}
