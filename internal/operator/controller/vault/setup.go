package vault

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=services.cloister.dev,resources=vaults,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=vaults/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=vaults/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// The policy the owners sign, published unsigned.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch
// The recovery keys, sealed to the owners: made once, never read.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",resources=pods,verbs=delete
// +kubebuilder:rbac:groups=base.cloister.dev,resources=confidentialruntimes,verbs=get;list;watch

// Setup registers the Vault controller. It watches the Vault's pods (a
// replica's seal fails before the StatefulSet's status changes), and the
// CASes and ConfidentialRuntimes its pods' policy is made from.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "vault", &servicesv1beta1.Vault{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&servicesv1beta1.CAS{}, handler.EnqueueRequestsFromMapFunc(naming(mgr.GetClient()))).
		Watches(&basev1beta1.ConfidentialRuntime{}, handler.EnqueueRequestsFromMapFunc(all(mgr.GetClient())))
	return service.OwnPods(b, "Vault").Complete(r)
}

// naming maps a CAS to the Vaults of its namespace that name it.
func naming(r client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list servicesv1beta1.VaultList
		if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, v := range list.Items {
			if v.Spec.CAS.Name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&v)})
			}
		}
		return out
	}
}

// all maps any event to every Vault.
func all(r client.Reader) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list servicesv1beta1.VaultList
		if err := r.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, v := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&v)})
		}
		return out
	}
}
