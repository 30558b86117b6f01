package sgxplugin

import (
	"context"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=sgxplugins,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=sgxplugins/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=sgxplugins/finalizers,verbs=update
// The plugin chart grants its pods get/patch on nodes (to label SGX nodes);
// RBAC lets only a holder of those verbs grant them.
// +kubebuilder:rbac:groups=core,resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch

// Setup registers the SGXPlugin controller. Besides its CRs and owned
// objects it watches the nodes and the SGX pods: their allocatable devices
// and requests are the metrics. Heartbeat-only node updates are ignored, so
// a thousand nodes do not keep it busy.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list basev1beta1.SGXPluginList
		if err := mgr.GetClient().List(ctx, &list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i, p := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)}
		}
		return reqs
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sgxplugin").
		For(&basev1beta1.SGXPlugin{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Watches(&corev1.Node{}, all, builder.WithPredicates(nodeDevicesChanged)).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(sgxPodChanged)).
		Complete(r)
}

var nodeDevicesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return !maps.Equal(o.Labels, n.Labels) ||
			!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
	},
}

var sgxPodChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return RequestsSGX(e.Object.(*corev1.Pod)) },
	DeleteFunc: func(e event.DeleteEvent) bool { return RequestsSGX(e.Object.(*corev1.Pod)) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return RequestsSGX(n) && (o.Spec.NodeName != n.Spec.NodeName || o.Status.Phase != n.Status.Phase ||
			(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}
