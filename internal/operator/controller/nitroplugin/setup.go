package nitroplugin

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=base.cloister.dev,resources=nitroplugins,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=nitroplugins/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=base.cloister.dev,resources=nitroplugins/finalizers,verbs=update

// Setup registers the NitroPlugin controller; like SGXPlugin's it also
// watches nodes and the pods that use enclaves, and AWS's plugin's pods.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "nitroplugin", &basev1beta1.NitroPlugin{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&rbacv1.ClusterRoleBinding{})
	aws := predicate.NewPredicateFuncs(func(o client.Object) bool { p, ok := o.(*corev1.Pod); return ok && IsAWSPlugin(p) })
	b = b.Watches(&corev1.Pod{}, devices.EnqueueAll(mgr.GetClient(), &basev1beta1.NitroPluginList{}), builder.WithPredicates(aws))
	return devices.Watch(b, mgr.GetClient(), &basev1beta1.NitroPluginList{}, requested).Complete(r)
}
