package operator

import (
	corev1 "k8s.io/api/core/v1"
)

// slimPod keeps what the controllers read of a pod (where it runs, what it
// requests, whether it is ready) so a large cluster's pods fit the
// operator's memory budget.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: p.TypeMeta}
	slim.ObjectMeta = *p.ObjectMeta.DeepCopy()
	slim.ManagedFields = nil
	slim.Annotations = nil
	slim.Spec.NodeName = p.Spec.NodeName
	slim.Spec.Overhead = p.Spec.Overhead
	slim.Spec.Resources = p.Spec.Resources
	slim.Spec.Containers = slimContainers(p.Spec.Containers)
	slim.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	slim.Status.Phase = p.Status.Phase
	slim.Status.Conditions = p.Status.Conditions
	return slim, nil
}

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

// slimNode keeps a node's labels and resources.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{TypeMeta: n.TypeMeta}
	slim.ObjectMeta = *n.ObjectMeta.DeepCopy()
	slim.ManagedFields = nil
	slim.Annotations = nil
	slim.Status.Capacity = n.Status.Capacity
	slim.Status.Allocatable = n.Status.Allocatable
	return slim, nil
}
