package nitroenclave

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=enclave.cloister.dev,resources=nitroenclavedeployments,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=enclave.cloister.dev,resources=nitroenclavedeployments/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=enclave.cloister.dev,resources=nitroenclavedeployments/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=core,resources=events,verbs=list

// Setup registers the NitroEnclaveDeployment controller. Besides what it
// owns it watches the enclave pods (READY comes from them) and the Nitro
// nodes' offer of enclave CPUs (whether the pods request them).
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "nitroenclavedeployment", &enclavev1beta1.NitroEnclaveDeployment{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			var list enclavev1beta1.NitroEnclaveDeploymentList
			if err := mgr.GetClient().List(ctx, &list); err != nil {
				return nil
			}
			out := make([]reconcile.Request, 0, len(list.Items))
			for _, n := range list.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&n)})
			}
			return out
		}), builder.WithPredicates(enclaveCPUsChanged))
	return service.OwnPods(b, "NitroEnclaveDeployment").Complete(r)
}

// enclaveCPUsChanged passes a node event only when it changes whether the
// node offers enclave CPUs: node status updates are many.
var enclaveCPUsChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return offersCPUsObj(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return offersCPUsObj(e.Object) },
	UpdateFunc:  func(e event.UpdateEvent) bool { return offersCPUsObj(e.ObjectOld) != offersCPUsObj(e.ObjectNew) },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func offersCPUsObj(o client.Object) bool {
	n, ok := o.(*corev1.Node)
	return ok && offersCPUs(*n)
}
