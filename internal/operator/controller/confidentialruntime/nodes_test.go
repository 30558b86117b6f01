package confidentialruntime

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// installer is an installer pod on node: mode "install" or "remove", ready
// or not, and the termination message of its last failure ("" for none).
func installer(node, mode string, ready bool, failure string) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ccr-x-" + node, Labels: map[string]string{LabelMode: mode}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
	if failure != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: failure + "\n"}}}}
	}
	return p
}

func daemonSet(desired int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired}}
}

func TestNodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ds      *appsv1.DaemonSet
		pods    []corev1.Pod
		health  string
		reason  string
		alert   int32
		message []string
		states  map[string]basev1beta1.RuntimeNodeState
	}{
		{name: "no DaemonSet yet", health: "Unknown", reason: "RuntimeNotDeployed", alert: -1},
		{name: "no node selected", ds: daemonSet(0), health: "True", reason: "NoNodes"},
		{name: "installed everywhere", ds: daemonSet(2),
			pods:   []corev1.Pod{installer("a", "install", true, ""), installer("b", "install", true, "")},
			health: "True", reason: "NoAlerts",
			states: map[string]basev1beta1.RuntimeNodeState{"a": "Installed", "b": "Installed"}},
		{name: "a node still installing", ds: daemonSet(2),
			pods:   []corev1.Pod{installer("a", "install", true, ""), installer("b", "install", false, "")},
			health: "Unknown", reason: "RuntimeInstalling", alert: 1, message: []string{"(b)"},
			states: map[string]basev1beta1.RuntimeNodeState{"a": "Installed", "b": "Installing"}},
		{name: "a node failed: its reason shows", ds: daemonSet(2),
			pods:   []corev1.Pod{installer("a", "install", true, ""), installer("b", "install", false, "containerd did not come back")},
			health: "False", reason: "RuntimeInstallFailed", alert: 1, message: []string{"b: containerd did not come back"},
			states: map[string]basev1beta1.RuntimeNodeState{"a": "Installed", "b": "Failed"}},
		{name: "a failure before a success is history", ds: daemonSet(1),
			pods:   []corev1.Pod{installer("a", "install", true, "once failed")},
			health: "True", reason: "NoAlerts", states: map[string]basev1beta1.RuntimeNodeState{"a": "Installed"}},
		{name: "a pod not yet scheduled everywhere", ds: daemonSet(3),
			pods:   []corev1.Pod{installer("a", "install", true, "")},
			health: "Unknown", reason: "RuntimeInstalling", alert: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, h := Nodes(tc.ds, tc.pods)
			if string(h.Status) != tc.health || string(h.Reason) != tc.reason || st.RuntimeInstallAlert != tc.alert {
				t.Errorf("%s %s alert %d (%s), want %s %s alert %d", h.Status, h.Reason, st.RuntimeInstallAlert, h.Message, tc.health, tc.reason, tc.alert)
			}
			for _, m := range tc.message {
				if !strings.Contains(h.Message, m) {
					t.Errorf("message %q does not say %q", h.Message, m)
				}
			}
			for node, want := range tc.states {
				if st.Nodes[node].State != want {
					t.Errorf("node %s: %+v, want %s", node, st.Nodes[node], want)
				}
			}
		})
	}
}

func TestRemoved(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		pods []corev1.Pod
		want service.DrainState
		msg  string
	}{
		{"every node removed", daemonSet(2), []corev1.Pod{installer("a", "remove", true, ""), installer("b", "remove", true, "")}, service.Drained, "2 nodes"},
		{"an old installer still runs", daemonSet(2), []corev1.Pod{installer("a", "remove", true, ""), installer("b", "install", true, "")}, service.Draining, "from b"},
		{"a removal failed", daemonSet(1), []corev1.Pod{installer("a", "remove", false, "containerd gone")}, service.Draining, "a (containerd gone)"},
		{"a node without its pod yet", daemonSet(2), []corev1.Pod{installer("a", "remove", true, "")}, service.Draining, ""},
		{"no nodes", daemonSet(0), nil, service.Drained, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := Removed(tc.ds, tc.pods)
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("%v %q, want %v %q", got, msg, tc.want, tc.msg)
			}
		})
	}
}
