package nitroenclave

import (
	"encoding/hex"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

func pod(name string, mod ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, m := range mod {
		m(&p)
	}
	return p
}

func unready(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }

func pending(why string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: why}}
	}
}

func deleting(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }

func TestReplicas(t *testing.T) {
	three := int32(3)
	dep := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
		"app.kubernetes.io/name": "cloister-enclave", "app.kubernetes.io/instance": "ned-x"}}}}
	for _, tc := range []struct {
		name     string
		replicas *int32
		dep      *appsv1.Deployment
		pods     Pods
		ready    string
		counts   [2]int32
		status   metav1.ConditionStatus
		reason   health.Reason
		says     string
	}{
		{"no Deployment yet", nil, nil, Pods{}, "0/1", [2]int32{0, 0}, health.Unknown, health.ReasonDeploymentMissing, "does not exist yet"},
		{"all ready", &three, dep, Pods{Items: []corev1.Pod{pod("a"), pod("b"), pod("c")}}, "3/3", [2]int32{3, 3}, health.True, health.ReasonEnclavesReady, "3 of 3"},
		{"booting", nil, dep, Pods{Items: []corev1.Pod{pod("a", unready)}}, "0/1", [2]int32{1, 0}, health.Unknown, health.ReasonEnclavesStarting, "booting: a"},
		{"an enclave reports a failed plugin", nil, dep, Pods{Items: []corev1.Pod{pod("a", unready)}, ProbeFailures: map[string]string{"a": "plugin job failed: exited with code 7"}},
			"0/1", [2]int32{1, 0}, health.False, health.ReasonEnclavesNotReady, "pod a: plugin job failed: exited with code 7"},
		{"no room for the fifth", &three, dep, Pods{Items: []corev1.Pod{pod("a"), pod("b"), pod("c", pending("0/6 nodes are available: 1 Insufficient aws.ec2.nitro/nitro_enclaves"))}},
			"2/3", [2]int32{3, 2}, health.False, health.ReasonEnclavesNotReady, "pod c cannot be scheduled: 0/6 nodes are available: 1 Insufficient aws.ec2.nitro/nitro_enclaves"},
		{"terminating pods do not count", nil, dep, Pods{Items: []corev1.Pod{pod("old", deleting), pod("new")}}, "1/1", [2]int32{1, 1}, health.True, health.ReasonEnclavesReady, ""},
	} {
		st, obs := Replicas(&enclavev1beta1.NitroEnclaveDeploymentSpec{Replicas: tc.replicas}, tc.dep, tc.pods)
		if st.Ready != tc.ready || st.Replicas != tc.counts[0] || st.ReadyReplicas != tc.counts[1] || obs.Status != tc.status ||
			obs.Reason != tc.reason || !strings.Contains(obs.Message, tc.says) {
			t.Errorf("%s: %+v, %+v", tc.name, st, obs)
		}
		if tc.dep != nil && st.Selector != "app.kubernetes.io/instance=ned-x,app.kubernetes.io/name=cloister-enclave" {
			t.Errorf("%s: selector %q", tc.name, st.Selector)
		}
	}
}

func TestDeploymentStatus(t *testing.T) {
	failed := health.Obs(health.True, health.ReasonReleaseFailed, "invalid")
	ok := health.Obs(health.False, health.ReasonReleaseNotFailed, "")
	for _, tc := range []struct {
		prev   enclavev1beta1.DeploymentStatus
		dep    bool
		failed health.Observation
		want   enclavev1beta1.DeploymentStatus
	}{
		{"", false, ok, ""},
		{"", true, ok, enclavev1beta1.DeploymentScheduled},
		{"", false, failed, enclavev1beta1.DeploymentError},
		// Between uninstalling the failed release and the next attempt.
		{enclavev1beta1.DeploymentError, false, ok, enclavev1beta1.DeploymentError},
		{enclavev1beta1.DeploymentError, true, ok, enclavev1beta1.DeploymentScheduled},
		{enclavev1beta1.DeploymentScheduled, true, failed, enclavev1beta1.DeploymentError},
	} {
		if got := DeploymentStatus(tc.prev, tc.dep, tc.failed); got != tc.want {
			t.Errorf("DeploymentStatus(%q, %v, %s) = %q, want %q", tc.prev, tc.dep, tc.failed.Status, got, tc.want)
		}
	}
}

// The enclave's resources as the scheduler must see them.
func TestResources(t *testing.T) {
	size := manifest.Size{CPUs: 4, MemoryMiB: 2047}
	q := func(r corev1.ResourceList, name corev1.ResourceName) string {
		v, ok := r[name]
		if !ok {
			return "-"
		}
		return v.String()
	}
	hp := corev1.ResourceName(corev1.ResourceHugePagesPrefix + "2Mi")

	r := Resources(corev1.ResourceRequirements{}, size, false, true)
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		if q(l, tee.NitroEnclaves) != "1" || q(l, hp) != "2Gi" || q(l, tee.NitroCPUs) != "4" {
			t.Errorf("nitro: %v", l)
		}
	}
	if q(r.Requests, corev1.ResourceMemory) != "64Mi" || q(r.Limits, corev1.ResourceMemory) != "128Mi" {
		t.Errorf("nitro supervisor memory: %v", r)
	}

	r = Resources(corev1.ResourceRequirements{}, manifest.Size{CPUs: 2, MemoryMiB: 512}, true, false)
	if q(r.Limits, tee.NitroEnclaves) != "1" || q(r.Limits, hp) != "-" || q(r.Limits, tee.NitroCPUs) != "-" || q(r.Limits, corev1.ResourceMemory) != "640Mi" {
		t.Errorf("sim: %v", r)
	}

	user := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceCPU: resource.MustParse("100m")}}
	r = Resources(user, size, false, false)
	if q(r.Requests, corev1.ResourceMemory) != "1Gi" || q(r.Limits, corev1.ResourceMemory) != "-" || q(r.Requests, corev1.ResourceCPU) != "100m" || q(r.Requests, tee.NitroCPUs) != "-" {
		t.Errorf("the spec's own resources: %v", r)
	}
	if _, ok := user.Limits[tee.NitroEnclaves]; ok {
		t.Error("Resources changed the spec's resources")
	}
}

// Events follow what was written: one per STATUS change, one per new
// problem the enclave pods report, none for an unchanged status.
func TestAnnounce(t *testing.T) {
	ned := func(status enclavev1beta1.DeploymentStatus, conds ...metav1.Condition) *enclavev1beta1.NitroEnclaveDeployment {
		n := &enclavev1beta1.NitroEnclaveDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
		n.Status.Status, n.Status.Conditions = status, conds
		return n
	}
	unhealthy := func(msg string) metav1.Condition {
		return metav1.Condition{Type: string(health.IsHealthy), Status: metav1.ConditionFalse, Reason: string(health.ReasonEnclavesNotReady), Message: msg}
	}
	failed := metav1.Condition{Type: string(health.ReleaseFailed), Status: metav1.ConditionTrue, Message: "spec.template...: must be less than or equal to cpu limit"}
	for _, tc := range []struct {
		name        string
		before, now *enclavev1beta1.NitroEnclaveDeployment
		want        []string
	}{
		{"scheduled", ned(""), ned(enclavev1beta1.DeploymentScheduled), []string{"Scheduled: Deployment ns/ned-x schedules the enclave pods"}},
		{"unchanged", ned(enclavev1beta1.DeploymentScheduled), ned(enclavev1beta1.DeploymentScheduled), nil},
		{"error", ned(""), ned(enclavev1beta1.DeploymentError, failed), []string{"DeploymentFailed: the enclave pods' Deployment could not be created: spec.template...: must be less than or equal to cpu limit"}},
		{"a plugin failed", ned(enclavev1beta1.DeploymentScheduled), ned(enclavev1beta1.DeploymentScheduled, unhealthy("pod a: plugin job failed")), []string{"EnclaveUnhealthy: pod a: plugin job failed"}},
		{"the same problem", ned(enclavev1beta1.DeploymentScheduled, unhealthy("pod a: plugin job failed")), ned(enclavev1beta1.DeploymentScheduled, unhealthy("pod a: plugin job failed")), nil},
	} {
		rec := &testenv.Events{}
		(&Kind{}).Announce(rec, tc.before, tc.now)
		var got []string
		for _, e := range rec.All() {
			got = append(got, e.Reason+": "+e.Message)
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s: events %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The status shows the PCRs a verifier pins: the spec's only once a pod
// booted an image file that measures so; the simulated evidence's in
// simulation, as its verifier computes them.
func TestPCRs(t *testing.T) {
	declared := &enclavev1beta1.EnclavePCRs{PCR0: strings.Repeat("a", 96), PCR1: strings.Repeat("b", 96), PCR2: strings.Repeat("c", 96)}
	spec := enclavev1beta1.NitroEnclaveDeploymentSpec{UserPlugins: []enclavev1beta1.UserPlugin{{Name: "api", Image: "r/api@sha256:" + strings.Repeat("1", 64)}}}
	spec.Enclave.PCRs = declared
	m, err := manifest.FromSpec(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := PCRs(&spec, m, 0); got != nil {
		t.Errorf("no pod ready, yet PCRs %v", got)
	}
	if got := PCRs(&spec, m, 1); got == nil || *got != *declared || got == declared {
		t.Errorf("a ready pod: %v, want a copy of %v", got, declared)
	}
	if m.Enclave.PCRs == nil || m.Enclave.PCRs.PCR2 != declared.PCR2 {
		t.Errorf("the manifest does not carry the PCRs to the supervisor: %+v", m.Enclave)
	}
	spec.Simulation = true
	m, _ = manifest.FromSpec(&spec)
	sim := m.SimPCRs()
	got := PCRs(&spec, m, 0)
	if got == nil || got.PCR0 != hex.EncodeToString(sim[manifest.PCRImage]) || got.PCR2 != hex.EncodeToString(sim[manifest.PCRApplication]) || m.Enclave.PCRs != nil {
		t.Errorf("simulation: %+v, manifest %+v", got, m.Enclave)
	}
}
