package service

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NewControllerManagedBy starts the controller of a service kind: named,
// reconciling obj's kind, and woken by what the reconciler acts on (spec,
// labels, annotations, finalizers, deletion) but not by its own status
// writes, which would only bring a pass that writes nothing.
func NewControllerManagedBy(mgr ctrl.Manager, name string, obj client.Object) *builder.Builder {
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(obj, builder.WithPredicates(NotStatusOnly))
}

// NotStatusOnly passes every event but an update that changed nothing
// besides the status (and the resource version).
var NotStatusOnly = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetGeneration() != n.GetGeneration() ||
			!maps.Equal(o.GetLabels(), n.GetLabels()) ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
			!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
			(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
	},
}

// OwnPods makes b watch the pods of kind's releases and wake the CR they
// belong to, found by the owner labels every release puts on its pods. A
// kind whose status comes from its pods (readiness, IP) needs this: pod
// changes may reach the cache before their workload's status does.
func OwnPods(b *builder.Builder, kind string) *builder.Builder {
	ours := func(obj client.Object) bool { return obj.GetLabels()[LabelOwnerKind] == kind }
	return b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		l := obj.GetLabels()
		if !ours(obj) || l[LabelOwnerName] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: l[LabelOwnerNamespace], Name: l[LabelOwnerName]}}}
	}), builder.WithPredicates(predicate.NewPredicateFuncs(ours)))
}
