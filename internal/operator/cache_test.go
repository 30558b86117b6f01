package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	lascontroller "github.com/cloister-cc/cloister/internal/operator/controller/las"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

func fullPod(name string, labels map[string]string, resources corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: "u-name", ResourceVersion: "7", Labels: labels,
			Annotations:     map[string]string{"big": string(make([]byte, 4096))},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}},
		Spec: corev1.PodSpec{NodeName: "sgx-0", Containers: []corev1.Container{{
			Name: "app", Image: "example.com/app:1", Command: []string{"/app", "--serve"},
			Env:       []corev1.EnvVar{{Name: "A", Value: "b"}},
			Resources: corev1.ResourceRequirements{Requests: resources, Limits: resources},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// The pod cache keeps what the controllers read and nothing else: device
// pods their node, phase and requests; the operator's own pods their
// labels and readiness; other pods their identity alone.
func TestSlimPod(t *testing.T) {
	enclave := corev1.ResourceList{tee.SGXEnclave: resource.MustParse("1")}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}

	got, _ := slimPod(fullPod("enclave-app", nil, enclave))
	p := got.(*corev1.Pod)
	used := devices.UsedPerNode([]corev1.Pod{*p}, func(n corev1.ResourceName) bool { return n == tee.SGXEnclave })
	if used["sgx-0"][tee.SGXEnclave] != 1 || p.Status.Phase != corev1.PodRunning || !devices.RequestsAny(p, isDevice) {
		t.Errorf("device pod lost what the counts need: %+v", p)
	}
	if p.Annotations != nil || p.Spec.Containers[0].Image != "" || p.Spec.Containers[0].Env != nil || p.Status.PodIP != "" {
		t.Errorf("device pod kept more than the counts need: %+v", p)
	}

	got, _ = slimPod(fullPod("las-x", map[string]string{service.LabelOwnerKind: "LAS", service.LabelOwnerName: "las",
		lascontroller.LabelVersion: "1.2", "controller-revision-hash": "abc"}, nil))
	p = got.(*corev1.Pod)
	if p.Labels[service.LabelOwnerName] != "las" || p.Labels[lascontroller.LabelVersion] != "1.2" || p.Spec.NodeName != "sgx-0" ||
		len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.PodReady || p.Status.PodIP == "" {
		t.Errorf("operator pod lost its labels, node, readiness or IP: %+v", p)
	}
	if _, kept := p.Labels["controller-revision-hash"]; kept {
		t.Errorf("operator pod kept labels no controller reads: %v", p.Labels)
	}

	// Why an operator's pod waits: the NED names it.
	waiting := fullPod("ned-x-1", map[string]string{service.LabelOwnerKind: "NitroEnclaveDeployment", service.LabelOwnerName: "x"}, nil)
	waiting.Spec.NodeName, waiting.Status.Phase = "", corev1.PodPending
	waiting.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/6 nodes are available: 1 Insufficient aws.ec2.nitro/nitro_enclaves"},
	}
	got, _ = slimPod(waiting)
	p = got.(*corev1.Pod)
	if len(p.Status.Conditions) != 2 || p.Status.Conditions[1].Reason != corev1.PodReasonUnschedulable || p.Status.Conditions[1].Message == "" {
		t.Errorf("unschedulable operator pod lost why: %+v", p.Status.Conditions)
	}

	got, _ = slimPod(fullPod("web", map[string]string{"app": "web"}, cpu))
	p = got.(*corev1.Pod)
	if p.Name != "web" || p.Namespace != "apps" || p.UID != "u-name" || p.ResourceVersion != "7" ||
		p.Labels != nil || p.Spec.NodeName != "" || p.Spec.Containers != nil || p.Status.Phase != "" {
		t.Errorf("unrelated pod kept more than its identity: %+v", p)
	}
}
