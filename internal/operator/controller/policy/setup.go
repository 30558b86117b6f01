package policy

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// +kubebuilder:rbac:groups=cas.cloister.dev,resources=signedpolicies;encryptedpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=cas.cloister.dev,resources=signedpolicies/status;encryptedpolicies/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=services.cloister.dev,resources=cas,verbs=get;list;watch

// Setup registers the SignedPolicy and EncryptedPolicy controllers. Each
// is woken by its own resources (not by its status writes) and by changes
// of CAS resources, which mean their CAS may now take what it could not.
func Setup(mgr ctrl.Manager, connector *conn.Connector) error {
	for _, k := range []struct {
		name string
		obj  Object
		list func() (client.ObjectList, func() []Object)
	}{
		{"signedpolicy", &casv1beta1.SignedPolicy{}, func() (client.ObjectList, func() []Object) {
			l := &casv1beta1.SignedPolicyList{}
			return l, func() []Object { return each(l.Items) }
		}},
		{"encryptedpolicy", &casv1beta1.EncryptedPolicy{}, func() (client.ObjectList, func() []Object) {
			l := &casv1beta1.EncryptedPolicyList{}
			return l, func() []Object { return each(l.Items) }
		}},
	} {
		proto := k.obj
		r := &Reconciler{Client: mgr.GetClient(), Connector: connector, Recorder: mgr.GetEventRecorder("cloister-operator"),
			New: func() Object { return proto.DeepCopyObject().(Object) }}
		err := ctrl.NewControllerManagedBy(mgr).Named(k.name).
			For(k.obj, builder.WithPredicates(service.NotStatusOnly)).
			Watches(&servicesv1beta1.CAS{}, handler.EnqueueRequestsFromMapFunc(policiesOf(mgr.GetClient(), k.list))).
			Complete(r)
		if err != nil {
			return err
		}
	}
	return nil
}

// each takes the address of every item, as Objects.
func each[T any, PT interface {
	*T
	Object
}](items []T) []Object {
	out := make([]Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// policiesOf maps a CAS resource to the policies whose casAddress names it.
func policiesOf(c client.Reader, list func() (client.ObjectList, func() []Object)) handler.MapFunc {
	return func(ctx context.Context, cas client.Object) []reconcile.Request {
		l, items := list()
		if err := c.List(ctx, l); err != nil {
			log.FromContext(ctx).Error(err, "listing policies for a CAS change", "cas", client.ObjectKeyFromObject(cas))
			return nil
		}
		var out []reconcile.Request
		for _, p := range items() {
			ref, err := conn.ParseAddress(p.GetCASAddress())
			if err == nil && ref.Namespace == cas.GetNamespace() && ref.Name == cas.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			}
		}
		return out
	}
}
