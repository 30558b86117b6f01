package confidentialruntime

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=confidentialruntimes,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=confidentialruntimes/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=confidentialruntimes/finalizers,verbs=update
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch;create;update;patch;delete
// The installer chart grants its pods get/patch on nodes (to label them);
// RBAC lets only a holder of those verbs grant them.
// +kubebuilder:rbac:groups=core,resources=nodes,verbs=get;list;watch;patch

// Setup registers the ConfidentialRuntime controller. It watches the
// installer pods: each node's state comes from its pod.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "confidentialruntime", &basev1beta1.ConfidentialRuntime{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Owns(&nodev1.RuntimeClass{})
	return service.OwnPods(b, "ConfidentialRuntime").Complete(r)
}
