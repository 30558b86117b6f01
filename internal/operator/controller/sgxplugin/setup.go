package sgxplugin

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=sgxplugins,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=sgxplugins/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=sgxplugins/finalizers,verbs=update
// The plugin chart grants its pods get/patch on nodes (to label SGX nodes);
// RBAC lets only a holder of those verbs grant them.
// +kubebuilder:rbac:groups=core,resources=nodes,verbs=get;list;watch;patch
// It grants them patch on nodes/status too (the node's EPC), so the
// operator holds it; the node-capacity admission policy refuses the
// operator's own use of it (it changes no node's status).
// +kubebuilder:rbac:groups=core,resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch

// Setup registers the SGXPlugin controller. Besides its CRs and owned
// objects it watches the nodes and the SGX pods: their allocatable devices
// and requests are the metrics.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "sgxplugin", &basev1beta1.SGXPlugin{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{})
	return devices.Watch(b, mgr.GetClient(), &basev1beta1.SGXPluginList{}, isSGX).Complete(r)
}
