package cas

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// The init token Secret is made and renewed, never read: only the CAS pod
// (which mounts it) and whoever initialises CAS read it.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch

// Setup registers the CAS controller. It watches the CAS pod too: its IP
// and readiness (CAS initialised or recovered) change before the
// StatefulSet's status does.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "cas", &servicesv1beta1.CAS{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{})
	return service.OwnPods(b, "CAS").Complete(r)
}
