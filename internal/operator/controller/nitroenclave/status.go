package nitroenclave

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Pods is what the status reads of the enclave pods.
type Pods struct {
	Items []corev1.Pod
	// ProbeFailures are, by pod name, what the last failed readiness
	// probe of an unready pod printed: why its enclave is unhealthy.
	ProbeFailures map[string]string
}

// Replicas fills the READY column and the scale subresource's fields from
// the Deployment (nil when it does not exist) and its pods, and judges
// IsHealthy: every desired enclave pod ready. Pods still booting leave it
// Unknown; a pod whose enclave reports a problem, or that cannot be
// scheduled, makes it False, saying which pod and why.
func Replicas(spec *enclavev1beta1.NitroEnclaveDeploymentSpec, dep *appsv1.Deployment, pods Pods) (enclavev1beta1.NitroEnclaveDeploymentStatus, health.Observation) {
	var st enclavev1beta1.NitroEnclaveDeploymentStatus
	desired := desired(spec)
	var problems, starting []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		st.Replicas++
		if service.PodReady(p) {
			st.ReadyReplicas++
			continue
		}
		if why := unschedulable(p); why != "" {
			problems = append(problems, fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, why))
		} else if why := pods.ProbeFailures[p.Name]; why != "" {
			problems = append(problems, fmt.Sprintf("pod %s: %s", p.Name, why))
		} else {
			starting = append(starting, p.Name)
		}
	}
	st.Ready = fmt.Sprintf("%d/%d", st.ReadyReplicas, desired)
	if dep == nil {
		return st, health.Obs(health.Unknown, health.ReasonDeploymentMissing, "the enclave pods' Deployment does not exist yet")
	}
	if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err == nil {
		st.Selector = sel.String()
	}
	slices.Sort(problems)
	slices.Sort(starting)
	switch {
	case len(problems) > 0:
		return st, health.Obs(health.False, health.ReasonEnclavesNotReady,
			fmt.Sprintf("%d of %d enclave pods ready; %s", st.ReadyReplicas, desired, strings.Join(problems, "; ")))
	case st.ReadyReplicas < desired:
		msg := fmt.Sprintf("%d of %d enclave pods ready", st.ReadyReplicas, desired)
		if len(starting) > 0 {
			msg += "; booting: " + strings.Join(starting, ", ")
		}
		return st, health.Obs(health.Unknown, health.ReasonEnclavesStarting, msg)
	}
	return st, health.Obs(health.True, health.ReasonEnclavesReady, fmt.Sprintf("%d of %d enclave pods ready", st.ReadyReplicas, desired))
}

// desired is the number of enclave pods the spec asks for.
func desired(spec *enclavev1beta1.NitroEnclaveDeploymentSpec) int32 {
	if spec.Replicas == nil {
		return 1
	}
	return *spec.Replicas
}

// unschedulable is the scheduler's reason a pod waits, if it does.
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

// DeploymentStatus is the STATUS column: SCHEDULED while the Deployment
// exists, ERROR while the release that creates it failed, else as it was
// (a failed release is uninstalled before the next attempt: between the
// two the Deployment still could not be created).
func DeploymentStatus(prev enclavev1beta1.DeploymentStatus, dep bool, failed health.Observation) enclavev1beta1.DeploymentStatus {
	switch {
	case failed.Status == health.True:
		return enclavev1beta1.DeploymentError
	case dep:
		return enclavev1beta1.DeploymentScheduled
	}
	return prev
}

// PCRs are what a verifier pins the enclaves of spec by: in simulation,
// the simulated evidence's, from the manifest m; on Nitro, the spec's
// once a pod is ready, since its supervisor booted only an image file
// that measures so; otherwise none yet.
func PCRs(spec *enclavev1beta1.NitroEnclaveDeploymentSpec, m *manifest.Manifest, ready int32) *enclavev1beta1.EnclavePCRs {
	if spec.Simulation {
		sim := m.SimPCRs()
		return &enclavev1beta1.EnclavePCRs{PCR0: hex.EncodeToString(sim[manifest.PCRImage]), PCR1: hex.EncodeToString(sim[manifest.PCRKernel]),
			PCR2: hex.EncodeToString(sim[manifest.PCRApplication])}
	}
	if spec.Enclave.PCRs == nil || ready == 0 {
		return nil
	}
	p := *spec.Enclave.PCRs
	return &p
}
