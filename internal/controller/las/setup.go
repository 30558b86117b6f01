package las

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=las,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=las/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=las/finalizers,verbs=update

// Setup registers the LAS controller. It watches the LAS pods themselves,
// not only the DaemonSet: the per-node status (ready, version) comes from
// the pods, and their changes may reach the cache after the DaemonSet's.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	return service.NewControllerManagedBy(mgr, "las", &basev1beta1.LAS{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(ownerOfPod),
			builder.WithPredicates(predicate.NewPredicateFuncs(isLASPod))).
		Complete(r)
}

func isLASPod(obj client.Object) bool {
	return obj.GetLabels()[service.LabelOwnerKind] == "LAS"
}

// ownerOfPod maps a LAS pod to its (cluster-scoped) LAS by the labels the
// release puts on every pod.
func ownerOfPod(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[service.LabelOwnerName]
	if !isLASPod(obj) || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
}
