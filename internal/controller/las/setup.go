package las

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=las,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=las/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=las/finalizers,verbs=update

// Setup registers the LAS controller. Pod readiness reaches it through the
// DaemonSet's status, which counts ready pods.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("las").
		For(&basev1beta1.LAS{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Complete(r)
}
