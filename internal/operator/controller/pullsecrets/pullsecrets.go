// Package pullsecrets copies image pull secrets from the operator's
// namespace into the namespaces that ask for them, so workloads there can
// pull images from the same registry (the SCONE operator installs a
// third-party "imagepullsecrets" chart for this). A namespace asks with
// the label common.LabelPullSecretRequest, whose value names the secret; only secrets the
// administrator marked shareable (common.LabelShareable) and of type
// kubernetes.io/dockerconfigjson are ever copied, so a namespace cannot ask
// for the operator's other secrets. Copies follow their source: updated
// when it changes, deleted when the namespace stops asking or the source
// goes.
package pullsecrets

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloister-cc/cloister/api/common"
)

const (
	// LabelCopiedFrom marks a copy with its source's namespace.
	LabelCopiedFrom = "cloister.dev/copied-from"
	// FieldManager owns the copies' fields.
	FieldManager = "cloister-pull-secrets"
)

// Copies need no read access to other namespaces' secrets: they are
// written with server-side apply and removed by name.
// +kubebuilder:rbac:groups=core,resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=create;patch;deletecollection

// Reconciler keeps one namespace's copy.
type Reconciler struct {
	// Client reads namespaces and the operator namespace's secrets from
	// the cache and writes copies.
	Client client.Client
	// Namespace is the operator's: the sources live there.
	Namespace string
}

// Setup registers the controller: namespaces that ask, and every change of
// a shareable source (which wakes the namespaces asking for it).
func Setup(mgr ctrl.Manager, r *Reconciler) error {
	asks := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[common.LabelPullSecretRequest]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).Named("pull-secrets").
		// Update events also carry a removed label (the old object asked).
		For(&corev1.Namespace{}, builder.WithPredicates(predicate.Or(asks, labelChanged(common.LabelPullSecretRequest)))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.askers),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == r.Namespace }))).
		Complete(r)
}

// labelChanged passes updates that change the label, nothing else.
func labelChanged(key string) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetLabels()[key] != e.ObjectNew.GetLabels()[key]
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// askers are the namespaces asking for the secret obj.
func (r *Reconciler) askers(ctx context.Context, obj client.Object) []reconcile.Request {
	var nss corev1.NamespaceList
	if err := r.Client.List(ctx, &nss, client.MatchingLabels{common.LabelPullSecretRequest: obj.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(nss.Items))
	for _, ns := range nss.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: ns.Name}})
	}
	return reqs
}

// Reconcile makes the namespace's copy what its label and the source say.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Name == r.Namespace {
		return reconcile.Result{}, nil // the sources' own namespace
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, req.NamespacedName, &ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	name, asks := ns.Labels[common.LabelPullSecretRequest]
	if ns.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	var src corev1.Secret
	if asks && len(validation.IsDNS1123Subdomain(name)) == 0 {
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, &src)
		if err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		if err == nil && Shareable(&src) {
			if err := r.apply(ctx, ns.Name, &src); err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{}, r.remove(ctx, ns.Name, name) // copies of a name asked for before
		}
	}
	// Not asked for, not shareable or gone: no copy.
	return reconcile.Result{}, r.remove(ctx, ns.Name, "")
}

// Shareable says whether a secret may be copied: marked so by the
// administrator, and a pull secret.
func Shareable(s *corev1.Secret) bool {
	return s.Labels[common.LabelShareable] == "true" && s.Type == corev1.SecretTypeDockerConfigJson
}

// Copy is the copy of src in namespace ns, as an apply configuration.
func Copy(src *corev1.Secret, ns string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(src.Name, ns).
		WithLabels(map[string]string{LabelCopiedFrom: src.Namespace, common.LabelManagedBy: common.ManagedByOperator,
			"app.kubernetes.io/managed-by": common.ManagedByOperator}).
		WithType(src.Type).
		WithData(maps.Clone(src.Data))
}

func (r *Reconciler) apply(ctx context.Context, ns string, src *corev1.Secret) error {
	if err := r.Client.Apply(ctx, Copy(src, ns), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("copying pull secret %s/%s to %s: %w", src.Namespace, src.Name, ns, err)
	}
	return nil
}

// remove deletes the copies in ns but the one named keep, and only
// copies: a delete-collection selecting the copy label, since the operator
// may not read secrets outside its namespace to check what a secret is.
func (r *Reconciler) remove(ctx context.Context, ns, keep string) error {
	opts := []client.DeleteAllOfOption{client.InNamespace(ns), client.MatchingLabels{LabelCopiedFrom: r.Namespace}}
	if keep != "" {
		opts = append(opts, client.MatchingFieldsSelector{Selector: fields.OneTermNotEqualSelector("metadata.name", keep)})
	}
	if err := r.Client.DeleteAllOf(ctx, &corev1.Secret{}, opts...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing pull secret copies from %s: %w", ns, err)
	}
	return nil
}
