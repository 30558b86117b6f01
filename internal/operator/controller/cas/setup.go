package cas

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// CAS's service account gets the fixed ClusterRole on its state, bound in
// its namespace: the operator may bind that role and no other.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=cloister-cas-state;cloister-cas-backup
// The scheduled backup, whose last success the status shows.
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;update;patch;delete
// The init token Secret is made and renewed, never read: only the CAS pod
// (which mounts it) and whoever initialises CAS read it.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch
// A simulated CAS's simulation keys, for its pod and its clients' pods.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch

// Setup registers the CAS controller. It watches the CAS pod too: its IP
// and readiness (CAS initialised or recovered) change before the
// StatefulSet's status does; and every LAS, whose node keys the simulated
// CASes take workload evidence from.
func Setup(mgr ctrl.Manager, r *service.Reconciler) error {
	b := service.NewControllerManagedBy(mgr, "cas", &servicesv1beta1.CAS{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&batchv1.CronJob{}).
		Watches(&basev1beta1.LAS{}, handler.EnqueueRequestsFromMapFunc(simulated(mgr.GetClient())))
	return service.OwnPods(b, "CAS").Complete(r)
}

// simulated maps any event to the simulated CASes.
func simulated(r client.Reader) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list servicesv1beta1.CASList
		if err := r.List(ctx, &list); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, c := range list.Items {
			if c.Spec.Simulation {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
			}
		}
		return out
	}
}
