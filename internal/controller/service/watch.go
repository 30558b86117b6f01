package service

import (
	"maps"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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
