package sgxplugin

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"

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
	all := service.EnqueueAll(mgr.GetClient(), &basev1beta1.SGXPluginList{})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sgxplugin").
		For(&basev1beta1.SGXPlugin{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Watches(&corev1.Node{}, all, builder.WithPredicates(service.NodeDevicesChanged)).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(service.PodsRequesting(isSGX))).
		Complete(r)
}
