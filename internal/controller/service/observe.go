package service

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/cloister-cc/cloister/internal/health"
	"github.com/cloister-cc/cloister/internal/release"
)

// OwnedObject pairs an object the release should contain with what is
// live in the cluster.
type OwnedObject struct {
	ID      string
	Desired *unstructured.Unstructured
	// Live is nil when the object does not exist (or could not be read).
	Live *unstructured.Unstructured
	// Deployed is the object in the latest release revision, nil if absent.
	Deployed *unstructured.Unstructured
}

// observe gathers every condition of the table for obj.
func (r *Reconciler) observe(ctx context.Context, obj Object, req release.Request) (health.Observations, []OwnedObject, error) {
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
	installed := rel.Exists.Status == health.True

	oos := ownedObjects(rel)
	present, readErr := 0, false
	for i := range oos {
		oo := &oos[i]
		conds, err := r.observeOwned(ctx, obj, oo, installed, release.Changed(oo.Desired, oo.Deployed))
		if err != nil {
			readErr = true
		}
		if conds[health.OwnedObjectPresent].Status == health.True {
			present++
		}
		obs.OwnedObjects = append(obs.OwnedObjects, health.OwnedObject{ID: oo.ID, Conditions: conds})
	}
	switch {
	case readErr:
		u := health.Obs(health.Unknown, health.ReasonReadError, "reading the owned objects failed")
		obs.CR[health.AtLeastOneOwnedObjectPresent], obs.CR[health.AllOwnedObjectsPresent] = u, u
	default:
		detail := fmt.Sprintf("%d of %d present", present, len(oos))
		obs.CR[health.AtLeastOneOwnedObjectPresent] = boolObs(present > 0, health.ReasonOwnedObjects, detail)
		obs.CR[health.AllOwnedObjectsPresent] = boolObs(present == len(oos), health.ReasonOwnedObjects, detail)
	}
	obs.CR[health.IsHealthy] = r.Kind.FillStatus(ctx, obj, oos)
	return obs, oos, nil
}

// ownedObjects lists the objects of the desired rendering, and those only
// the deployed revision still has (an upgrade removes them).
func ownedObjects(rel *release.Observation) []OwnedObject {
	byKey := map[string]*OwnedObject{}
	var order []string
	add := func(u *unstructured.Unstructured, desired bool) {
		gvk := u.GroupVersionKind()
		id := health.ObjectID(gvk.Group, gvk.Kind, u.GetName())
		oo, ok := byKey[id]
		if !ok {
			oo = &OwnedObject{ID: id}
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
	out := make([]OwnedObject, 0, len(order))
	for _, id := range order {
		out = append(out, *byKey[id])
	}
	return out
}

// observeOwned computes the OO conditions of one object.
func (r *Reconciler) observeOwned(ctx context.Context, owner Object, oo *OwnedObject, installed, specChanged bool) (map[health.ConditionType]health.Observation, error) {
	c := map[health.ConditionType]health.Observation{}
	unknown := func(msg string) {
		for _, t := range []health.ConditionType{health.OwnedObjectHealthy, health.OwnedObjectDeletionPresent, health.OwnedObjectValidOwners,
			health.OwnsOwnedObject, health.SoleOwner, health.EqualSpecs} {
			if _, set := c[t]; !set {
				c[t] = health.Obs(health.Unknown, health.ReasonNotPresent, msg)
			}
		}
	}
	ref := oo.Desired
	if ref == nil {
		ref = oo.Deployed
	}
	{
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := r.Reader.Get(ctx, client.ObjectKeyFromObject(ref), live)
		switch {
		case apierrors.IsNotFound(err):
			c[health.OwnedObjectPresent] = health.Obs(health.False, health.ReasonNotFound, "")
			c[health.EqualSpecs] = health.Obs(health.False, health.ReasonMissing, "the release should contain it")
			if installed {
				c[health.OwnedObjectHealthy] = health.Obs(health.False, health.ReasonMissing, "")
			} else {
				c[health.OwnedObjectHealthy] = health.Obs(health.Unknown, health.ReasonNotInstalled, "")
			}
			unknown("the object does not exist")
			return c, nil
		case err != nil:
			c[health.OwnedObjectPresent] = health.Obs(health.Unknown, health.ReasonReadError, err.Error())
			unknown("the object could not be read")
			return c, err
		}
		oo.Live = live
	}
	live := oo.Live
	c[health.OwnedObjectPresent] = health.Obs(health.True, health.ReasonFound, "")
	if ts := live.GetDeletionTimestamp(); ts != nil {
		c[health.OwnedObjectDeletionPresent] = health.Obs(health.True, health.ReasonDeleting, "since "+ts.String())
	} else {
		c[health.OwnedObjectDeletionPresent] = health.Obs(health.False, "", "")
	}
	owners := live.GetOwnerReferences()
	ours := false
	for _, o := range owners {
		if o.UID == owner.GetUID() {
			ours = true
		}
	}
	c[health.OwnedObjectValidOwners] = boolObs(len(owners) <= 1, health.ReasonOwners, fmt.Sprintf("%d owner references", len(owners)))
	c[health.OwnsOwnedObject] = boolObs(ours, health.ReasonOwner, "")
	c[health.SoleOwner] = boolObs(ours && len(owners) == 1, health.ReasonOwner, fmt.Sprintf("%d owner references", len(owners)))

	switch {
	case oo.Desired == nil:
		c[health.EqualSpecs] = health.Obs(health.False, health.ReasonNotInSpec, "no longer rendered for the CR: the upgrade removes it")
	case specChanged:
		c[health.EqualSpecs] = health.Obs(health.False, health.ReasonSpecChanged, "the CR's spec renders it differently from the deployed release")
	default:
		if p := contradiction(withoutOwners(oo.Desired), live.Object, ""); p != "" {
			c[health.EqualSpecs] = health.Obs(health.False, health.ReasonDrifted, p+" differs from the spec")
		} else {
			c[health.EqualSpecs] = health.Obs(health.True, "", "")
		}
	}
	c[health.OwnedObjectHealthy] = objectHealth(live)
	return c, nil
}

// withoutOwners drops what the status engine judges on its own: owner
// references (conditions 4 and 5).
func withoutOwners(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy()
	c.SetOwnerReferences(nil)
	unstructured.RemoveNestedField(c.Object, "metadata", "ownerReferences")
	return c.Object
}

// objectHealth judges workloads by their rollout; other objects are healthy
// when present.
func objectHealth(live *unstructured.Unstructured) health.Observation {
	if live.GetKind() != "DaemonSet" {
		return health.Obs(health.True, "", "")
	}
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, ds); err != nil {
		return health.Obs(health.Unknown, health.ReasonUnreadable, err.Error())
	}
	return DaemonSetHealth(ds)
}

// DaemonSetHealth is True when every scheduled pod runs the current
// template and is available, Unknown while the DaemonSet controller has not
// caught up with a change, and False otherwise.
func DaemonSetHealth(ds *appsv1.DaemonSet) health.Observation {
	st := ds.Status
	detail := fmt.Sprintf("%d of %d pods available, %d updated", st.NumberAvailable, st.DesiredNumberScheduled, st.UpdatedNumberScheduled)
	switch {
	case st.ObservedGeneration < ds.Generation:
		return health.Obs(health.Unknown, health.ReasonRolloutPending, "the DaemonSet controller has not seen the latest spec")
	case st.NumberAvailable < st.DesiredNumberScheduled || st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return health.Obs(health.False, health.ReasonPodsUnavailable, detail)
	default:
		return health.Obs(health.True, health.ReasonPodsAvailable, detail)
	}
}

func boolObs(ok bool, reason health.Reason, message string) health.Observation {
	if ok {
		return health.Obs(health.True, reason, message)
	}
	return health.Obs(health.False, reason, message)
}

// LiveDaemonSet returns the first live DaemonSet among the owned objects,
// or nil.
func LiveDaemonSet(oos []OwnedObject) *appsv1.DaemonSet {
	for _, oo := range oos {
		if oo.Live == nil || oo.Live.GetKind() != "DaemonSet" {
			continue
		}
		ds := &appsv1.DaemonSet{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(oo.Live.Object, ds) == nil {
			return ds
		}
	}
	return nil
}
