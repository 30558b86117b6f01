package devices

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Watch adds what every device kind's controller watches besides its CRs:
// nodes whose labels or allocatable resources change, pods that request
// one of the kind's resources, ResourceSlices and the allocation of
// ResourceClaims, each enqueuing every CR of list's kind (the numbers of
// each CR depend on all of them).
func Watch(b *builder.Builder, c client.Reader, list client.ObjectList, requested func(corev1.ResourceName) bool) *builder.Builder {
	all := EnqueueAll(c, list)
	return b.
		Watches(&corev1.Node{}, all, builder.WithPredicates(NodeDevicesChanged)).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(PodsRequesting(requested))).
		// Under DRA: the devices published, and the claims of them.
		Watches(&resourceapi.ResourceSlice{}, all).
		Watches(&resourceapi.ResourceClaim{}, all, builder.WithPredicates(ClaimAllocationChanged))
}

// EnqueueAll maps any event to every CR of list's kind. A list that fails
// is logged: the map function has no error to return, and the periodic
// resync brings the CRs back.
func EnqueueAll(c client.Reader, list client.ObjectList) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l); err != nil {
			log.FromContext(ctx).Error(err, "listing the CRs to reconcile after a node or pod change")
			return nil
		}
		var reqs []reconcile.Request
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o.(client.Object))})
			return nil
		})
		return reqs
	})
}

// ClaimAllocationChanged passes claims that come, go, or are allocated or
// released.
var ClaimAllocationChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*resourceapi.ResourceClaim), e.ObjectNew.(*resourceapi.ResourceClaim)
		return (o.Status.Allocation == nil) != (n.Status.Allocation == nil)
	},
}

// NodeDevicesChanged passes node updates that change labels or
// allocatable resources; heartbeat-only updates of a thousand nodes do not
// keep a controller busy.
var NodeDevicesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return !maps.Equal(o.Labels, n.Labels) ||
			!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
	},
}

// PodsRequesting passes events of pods that request a resource match
// accepts, when they come, go, bind, change phase or start terminating.
func PodsRequesting(match func(corev1.ResourceName) bool) predicate.Funcs {
	uses := func(o client.Object) bool { return RequestsAny(o.(*corev1.Pod), match) }
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return uses(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return uses(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
			return uses(n) && (o.Spec.NodeName != n.Spec.NodeName || o.Status.Phase != n.Status.Phase ||
				(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil))
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
