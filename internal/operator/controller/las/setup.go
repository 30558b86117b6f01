package las

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=las,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=las/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=las/finalizers,verbs=update

// Setup registers the LAS controller. It watches the LAS pods themselves,
// not only the DaemonSet: the per-node status (ready, version) comes from
// the pods, and their changes may reach the cache after the DaemonSet's.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "las", &basev1beta1.LAS{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{})
	return service.OwnPods(b, "LAS").Complete(r)
}
