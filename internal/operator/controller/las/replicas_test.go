package las

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lasPod(name, node, version string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelVersion: version}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func ds(desired, available int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberAvailable: available}}
}

func TestReplicas(t *testing.T) {
	st, h := Replicas(ds(2, 2), []corev1.Pod{lasPod("las-a", "sgx-0", "1.2", true), lasPod("las-b", "sgx-5", "1.2", true)})
	if st.DesiredNumberScheduled != 2 || st.NumberAvailable != 2 || st.LASReplicaAlert != 0 || st.Version != "1.2" || h.Status != "True" {
		t.Errorf("healthy LAS: %+v %+v", st, h)
	}
	if n := st.Nodes["sgx-5"]; n.Pod != "las-b" || !n.Ready || n.Version != "1.2" {
		t.Errorf("node entry %+v", n)
	}

	// "LAS Unhealthy": the SGX probe fails on one node.
	st, h = Replicas(ds(2, 1), []corev1.Pod{lasPod("las-a", "sgx-0", "1.2", false), lasPod("las-b", "sgx-5", "1.2", true)})
	if st.LASReplicaAlert != 1 || h.Status != "False" || h.Reason != "LASReplicaAlert" ||
		!strings.Contains(h.Message, "sgx-0") || !strings.Contains(h.Message, "/dev/sgx_enclave") {
		t.Errorf("unready LAS: alert %d, %+v", st.LASReplicaAlert, h)
	}
	if st.Nodes["sgx-0"].Ready {
		t.Error("unready pod reported ready")
	}

	// The pod's readiness arrives before the DaemonSet controller counts
	// it: the alert follows the pod, agreeing with the per-node map.
	st, h = Replicas(ds(2, 2), []corev1.Pod{lasPod("las-a", "sgx-0", "1.2", false), lasPod("las-b", "sgx-5", "1.2", true)})
	if st.LASReplicaAlert != 1 || h.Reason != "LASReplicaAlert" || !strings.Contains(h.Message, "sgx-0") {
		t.Errorf("pod not ready, DaemonSet not yet updated: alert %d, %+v", st.LASReplicaAlert, h)
	}

	st, h = Replicas(nil, nil)
	if st.DesiredNumberScheduled != -1 || st.NumberAvailable != -1 || st.LASReplicaAlert != -1 || h.Status != "Unknown" {
		t.Errorf("missing DaemonSet: %+v %+v", st, h)
	}

	// Mixed versions during a rollout are all shown.
	st, _ = Replicas(ds(2, 2), []corev1.Pod{lasPod("a", "n1", "1.3", true), lasPod("b", "n2", "1.2", true)})
	if st.Version != "1.2,1.3" {
		t.Errorf("version %q", st.Version)
	}
}

// The pod turned unready before the DaemonSet controller counted it: the
// status does not call the node available.
func TestReplicasAheadOfTheDaemonSet(t *testing.T) {
	st, h := Replicas(ds(1, 1), []corev1.Pod{lasPod("las-a", "sgx-0", "1.2", false)})
	if st.NumberAvailable != 0 || st.LASReplicaAlert != 1 || h.Status != "False" {
		t.Errorf("%+v %+v", st, h)
	}
}
