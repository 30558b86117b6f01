package service

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// Owned is one object of the CR's release: what the chart renders for it,
// what the deployed revision has, and what is live in the cluster.
type Owned struct {
	ID      string
	Desired *unstructured.Unstructured
	// Live is nil when the object does not exist (or could not be read).
	Live *unstructured.Unstructured
	// Deployed is the object in the latest release revision, nil if absent.
	Deployed *unstructured.Unstructured
	// ReadErr is why Live could not be read, nil when it was (or does not
	// exist).
	ReadErr error
}

// observe gathers every condition of the table for obj.
func (r *Reconciler) observe(ctx context.Context, obj Object, req release.Request) (health.Observations, []Owned, error) {
	yes, no := health.Obs(health.True, "", ""), health.Obs(health.False, "", "")
	obs := health.Observations{CR: map[health.ConditionType]health.Observation{}}
	if obj.GetDeletionTimestamp() != nil {
		obs.CR[health.DeletionPresent] = health.Obs(health.True, health.ReasonDeleting, "since "+obj.GetDeletionTimestamp().String())
	} else {
		obs.CR[health.DeletionPresent] = no
	}
	if controllerutil.ContainsFinalizer(obj, Finalizer) {
		obs.CR[health.FinalizerPresent] = yes
	} else {
		obs.CR[health.FinalizerPresent] = no
	}

	rel, err := r.Releases.Observe(ctx, req)
	if err != nil {
		return obs, nil, err
	}
	obs.CR[health.ReleaseExists] = rel.Exists
	obs.CR[health.ReleaseSteady] = rel.Steady
	obs.CR[health.ReleaseFailed] = rel.Failed
	obs.CR[health.ReleaseDeployed] = rel.Deployed
	obs.CR[health.ReleaseRolledBack] = rel.RolledBack
	installed := rel.Exists.Status == health.True

	oos := ownedObjects(rel)
	for i := range oos {
		r.readOwned(ctx, &oos[i])
		conds := ownedConditions(obj.GetUID(), oos[i], installed)
		if _, ok := r.Kind.(ReadinessJudge); ok {
			conds[health.OwnedObjectHealthy] = readinessJudgedByKind(conds[health.OwnedObjectHealthy])
		}
		obs.OwnedObjects = append(obs.OwnedObjects, health.OwnedObject{ID: oos[i].ID, Conditions: conds})
	}
	obs.CR[health.AtLeastOneOwnedObjectPresent], obs.CR[health.AllOwnedObjectsPresent] = presence(oos)
	obs.CR[health.IsHealthy] = r.Kind.FillStatus(ctx, obj, oos)
	if c, ok := r.Kind.(Conditioner); ok {
		for t, o := range c.Conditions(obj) {
			obs.CR[t] = o
		}
	}
	if f, ok := r.Kind.(ReleaseStatusFiller); ok {
		f.FillReleaseStatus(obj, oos, rel.Failed)
	}
	return obs, oos, nil
}

// ownedObjects lists the objects of the desired rendering, and those only
// the deployed revision still has (an upgrade removes them).
func ownedObjects(rel *release.Snapshot) []Owned {
	byKey := map[string]*Owned{}
	var order []string
	add := func(u *unstructured.Unstructured, desired bool) {
		gvk := u.GroupVersionKind()
		id := health.ObjectID(gvk.Group, gvk.Kind, u.GetName())
		oo, ok := byKey[id]
		if !ok {
			oo = &Owned{ID: id}
			byKey[id] = oo
			order = append(order, id)
		}
		if desired {
			oo.Desired = u
		} else {
			oo.Deployed = u
		}
	}
	for _, u := range rel.Desired {
		add(u, true)
	}
	for _, u := range rel.DeployedObjects {
		add(u, false)
	}
	out := make([]Owned, 0, len(order))
	for _, id := range order {
		out = append(out, *byKey[id])
	}
	return out
}

// readOwned reads the live object of oo past the cache: Live stays nil
// when it does not exist, ReadErr says when it could not be read.
func (r *Reconciler) readOwned(ctx context.Context, oo *Owned) {
	ref := oo.Desired
	if ref == nil {
		ref = oo.Deployed
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	switch err := r.Reader.Get(ctx, client.ObjectKeyFromObject(ref), live); {
	case apierrors.IsNotFound(err):
	case err != nil:
		oo.ReadErr = err
	default:
		oo.Live = live
	}
}

// LiveDaemonSet returns the first live DaemonSet among the owned objects,
// or nil.
func LiveDaemonSet(oos []Owned) *appsv1.DaemonSet {
	return live(oos, "DaemonSet", &appsv1.DaemonSet{})
}

// LiveDeployment returns the first live Deployment among the owned
// objects, or nil.
func LiveDeployment(oos []Owned) *appsv1.Deployment {
	return live(oos, "Deployment", &appsv1.Deployment{})
}

// live converts the first live owned object of kind into into, or returns
// nil.
func live[T any](oos []Owned, kind string, into *T) *T {
	for _, oo := range oos {
		if oo.Live == nil || oo.Live.GetKind() != kind {
			continue
		}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(oo.Live.Object, into) == nil {
			return into
		}
	}
	return nil
}

// PodReady says whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
