package service

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// The judging half of observing owned objects: pure functions from what
// was read to the conditions of the table, one per condition (or group),
// as cluster-api's *_status.go files do. Tested without a cluster.

// ownedConditions are the OO conditions of one object, owned by the CR
// with UID owner; installed says the release exists.
func ownedConditions(owner types.UID, oo Owned, installed bool) map[health.ConditionType]health.Observation {
	c := map[health.ConditionType]health.Observation{}
	switch {
	case oo.ReadErr != nil:
		c[health.OwnedObjectPresent] = health.Obs(health.Unknown, health.ReasonReadError, oo.ReadErr.Error())
		return unknownRest(c, "the object could not be read")
	case oo.Live == nil:
		c[health.OwnedObjectPresent] = health.Obs(health.False, health.ReasonNotFound, "")
		c[health.EqualSpecs] = health.Obs(health.False, health.ReasonMissing, "the release should contain it")
		c[health.OwnedObjectHealthy] = missingHealth(installed)
		return unknownRest(c, "the object does not exist")
	}
	c[health.OwnedObjectPresent] = health.Obs(health.True, health.ReasonFound, "")
	c[health.OwnedObjectDeletionPresent] = deletion(oo.Live)
	c[health.OwnedObjectValidOwners], c[health.OwnsOwnedObject], c[health.SoleOwner] = owners(oo.Live, owner)
	c[health.EqualSpecs] = equalSpecs(oo)
	c[health.OwnedObjectHealthy] = objectHealth(oo.Live)
	return c
}

// unknownRest marks every OO condition not yet set Unknown.
func unknownRest(c map[health.ConditionType]health.Observation, msg string) map[health.ConditionType]health.Observation {
	for _, t := range []health.ConditionType{health.OwnedObjectHealthy, health.OwnedObjectDeletionPresent, health.OwnedObjectValidOwners,
		health.OwnsOwnedObject, health.SoleOwner, health.EqualSpecs} {
		if _, set := c[t]; !set {
			c[t] = health.Obs(health.Unknown, health.ReasonNotPresent, msg)
		}
	}
	return c
}

// missingHealth: a missing object is unhealthy once the release exists,
// undetermined before.
func missingHealth(installed bool) health.Observation {
	if installed {
		return health.Obs(health.False, health.ReasonMissing, "")
	}
	return health.Obs(health.Unknown, health.ReasonNotInstalled, "")
}

func deletion(live *unstructured.Unstructured) health.Observation {
	if ts := live.GetDeletionTimestamp(); ts != nil {
		return health.Obs(health.True, health.ReasonDeleting, "since "+ts.String())
	}
	return health.Obs(health.False, "", "")
}

// owners judges OwnedObjectValidOwners, OwnsOwnedObject and SoleOwner.
func owners(live *unstructured.Unstructured, owner types.UID) (valid, owns, sole health.Observation) {
	refs := live.GetOwnerReferences()
	ours := false
	for _, o := range refs {
		ours = ours || o.UID == owner
	}
	detail := fmt.Sprintf("%d owner references", len(refs))
	return boolObs(len(refs) <= 1, health.ReasonOwners, detail),
		boolObs(ours, health.ReasonOwner, ""),
		boolObs(ours && len(refs) == 1, health.ReasonOwner, detail)
}

// equalSpecs: gone from the rendering, rendered differently than deployed
// (a spec change), or drifted in the cluster.
func equalSpecs(oo Owned) health.Observation {
	switch {
	case oo.Desired == nil:
		return health.Obs(health.False, health.ReasonNotInSpec, "no longer rendered for the CR: the upgrade removes it")
	case release.Changed(oo.Desired, oo.Deployed):
		return health.Obs(health.False, health.ReasonSpecChanged, "the CR's spec renders it differently from the deployed release")
	}
	if p := contradiction(withoutOwners(oo.Desired), oo.Live.Object, ""); p != "" {
		return health.Obs(health.False, health.ReasonDrifted, p+" differs from the spec")
	}
	return health.Obs(health.True, "", "")
}

// withoutOwners drops what the status engine judges on its own: owner
// references (the owner conditions).
func withoutOwners(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy()
	c.SetOwnerReferences(nil)
	unstructured.RemoveNestedField(c.Object, "metadata", "ownerReferences")
	return c.Object
}

// presence judges AtLeastOneOwnedObjectPresent and AllOwnedObjectsPresent.
func presence(oos []Owned) (atLeastOne, all health.Observation) {
	present := 0
	for _, oo := range oos {
		if oo.ReadErr != nil {
			u := health.Obs(health.Unknown, health.ReasonReadError, "reading the owned objects failed")
			return u, u
		}
		if oo.Live != nil {
			present++
		}
	}
	detail := fmt.Sprintf("%d of %d present", present, len(oos))
	return boolObs(present > 0, health.ReasonOwnedObjects, detail), boolObs(present == len(oos), health.ReasonOwnedObjects, detail)
}

// readinessJudgedByKind leaves a workload's pods not being ready to the
// kind's own rows, for a ReadinessJudge: they say PENDING (unsealing) or
// UNHEALTHY (a failure), which an Unknown here would hide as PENDING.
func readinessJudgedByKind(o health.Observation) health.Observation {
	if o.Status == health.False && o.Reason == health.ReasonPodsUnavailable {
		o.Status = health.True
		o.Message += "; the kind's own conditions judge its pods' readiness"
	}
	return o
}

// objectHealth judges workloads by their rollout; other objects are healthy
// when present.
func objectHealth(live *unstructured.Unstructured) health.Observation {
	switch live.GetKind() {
	case "DaemonSet":
		ds := &appsv1.DaemonSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, ds); err != nil {
			return health.Obs(health.Unknown, health.ReasonUnreadable, err.Error())
		}
		return DaemonSetHealth(ds)
	case "StatefulSet":
		ss := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, ss); err != nil {
			return health.Obs(health.Unknown, health.ReasonUnreadable, err.Error())
		}
		return StatefulSetHealth(ss)
	}
	return health.Obs(health.True, "", "")
}

// StatefulSetHealth is True when every replica runs the current revision
// and is ready, Unknown while the StatefulSet controller has not caught up
// with a change, and False otherwise.
func StatefulSetHealth(ss *appsv1.StatefulSet) health.Observation {
	st := ss.Status
	want := int32(1)
	if ss.Spec.Replicas != nil {
		want = *ss.Spec.Replicas
	}
	detail := fmt.Sprintf("%d of %d pods ready, %d updated", st.ReadyReplicas, want, st.UpdatedReplicas)
	switch {
	case st.ObservedGeneration < ss.Generation:
		return health.Obs(health.Unknown, health.ReasonRolloutPending, "the StatefulSet controller has not seen the latest spec")
	case st.ReadyReplicas < want || st.UpdatedReplicas < want:
		return health.Obs(health.False, health.ReasonPodsUnavailable, detail)
	default:
		return health.Obs(health.True, health.ReasonPodsAvailable, detail)
	}
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
