package cexplugin

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=cexplugins,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=cexplugins/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=cexplugins/finalizers,verbs=update
// +kubebuilder:rbac:groups=core,resources=configmaps,verbs=get;list;watch;create;update;patch;delete

// Setup registers the CEXPlugin controller; like SGXPlugin's it also
// watches nodes (allocatable, labels) and the pods that use CEX devices.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "cexplugin", &basev1beta1.CEXPlugin{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&corev1.ConfigMap{})
	return devices.Watch(b, mgr.GetClient(), &basev1beta1.CEXPluginList{}, anyCEX).Complete(r)
}
