package operator

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	lascontroller "github.com/cloister-cc/cloister/internal/operator/controller/las"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// slimPod keeps of a pod only what the controllers read, so a large
// cluster's pods fit the operator's memory budget:
//   - the operator's own pods (LAS replicas, CAS, enclave pods): their
//     cloister.dev labels and version, node, phase, readiness, why they
//     are unschedulable, IP (CAS is reached at its pod);
//   - pods asking for a TEE device (the device counts): node, phase and
//     their containers' resources;
//   - every other pod: its identity alone, which no controller reads
//     beyond.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		DeletionTimestamp: p.DeletionTimestamp,
	}}
	_, ours := p.Labels[service.LabelOwnerKind]
	device := devices.RequestsAny(p, isDevice)
	if !ours && !device {
		return slim, nil
	}
	slim.Spec.NodeName = p.Spec.NodeName
	slim.Status.Phase = p.Status.Phase
	if ours {
		slim.Status.PodIP = p.Status.PodIP
		slim.Labels = map[string]string{}
		for k, v := range p.Labels {
			if strings.HasPrefix(k, tee.LabelPrefix) || k == lascontroller.LabelVersion {
				slim.Labels[k] = v
			}
		}
		for _, c := range p.Status.Conditions {
			switch {
			case c.Type == corev1.PodReady:
				slim.Status.Conditions = append(slim.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status})
			case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
				// Why a pod waits (e.g. Insufficient aws.ec2.nitro/nitro_enclaves).
				slim.Status.Conditions = append(slim.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
			}
		}
		slim.Status.ContainerStatuses = slimTerminations(p.Status.ContainerStatuses)
	}
	if device {
		slim.Spec.Overhead = p.Spec.Overhead
		slim.Spec.Resources = p.Spec.Resources
		slim.Spec.Containers = slimContainers(p.Spec.Containers)
		slim.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	}
	return slim, nil
}

// isDevice: a TEE device resource of any kind.
func isDevice(name corev1.ResourceName) bool { return tee.IsDevice(string(name)) }

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
	return out
}

// slimTerminations keeps why containers ended: a node installer reports
// its failure as its termination message.
func slimTerminations(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, c := range cs {
		s := corev1.ContainerStatus{Name: c.Name}
		if t := c.State.Terminated; t != nil {
			s.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Message: t.Message}
		}
		if t := c.LastTerminationState.Terminated; t != nil {
			s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Message: t.Message}
		}
		if s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			out = append(out, s)
		}
	}
	return out
}

// slimNode keeps a node's labels and resources.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
	}}
	slim.Status.Capacity = n.Status.Capacity
	slim.Status.Allocatable = n.Status.Allocatable
	return slim, nil
}
