package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrl "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

func (r *Reconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// DefaultDeletionTimeout is how long deletion waits for an uninstall that
// keeps failing before the finalizer goes anyway.
const DefaultDeletionTimeout = 2 * time.Minute

// act takes the action the engine chose, then asks to look again: the next
// pass observes its effect.
func (r *Reconciler) act(ctx context.Context, obj Object, req release.Request, res health.Result, oos []Owned) (ctrl.Result, error) {
	logger := log.FromContext(ctx).WithValues("action", res.Action.String())
	again := ctrl.Result{RequeueAfter: actedRecheck}
	var err error
	switch res.Action {
	case health.ActionNone:
		return ctrl.Result{}, nil
	case health.ActionWait:
		return ctrl.Result{RequeueAfter: waitDelay}, nil
	case health.ActionUninstall:
		// A Drainer's pods first undo their work on the nodes.
		wait, derr := r.drain(ctx, obj, req, oos)
		if derr != nil {
			err = derr
			break
		}
		if wait {
			return ctrl.Result{RequeueAfter: waitDelay}, nil
		}
		if err = r.Releases.Uninstall(ctx, req.Namespace, req.Name); err != nil && r.deletionTimedOut(obj) {
			// Never let deletion hang on a release that cannot be removed.
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, string(health.EventUninstallTimedOut), "Delete",
				"giving up on uninstalling release %s/%s after %s: %v", req.Namespace, req.Name, r.deletionTimeout(), err)
			return again, r.removeFinalizer(ctx, obj)
		}
		r.record(obj, err, health.EventUninstalled, "Uninstall", "release %s/%s uninstalled", req.Namespace, req.Name)
	case health.ActionRemoveFinalizer:
		err = r.removeFinalizer(ctx, obj)
		if err == nil {
			r.Metrics.Forget(r.Kind.Name(), obj.GetNamespace(), obj.GetName())
			return ctrl.Result{}, nil
		}
	case health.ActionAddFinalizer:
		before := obj.DeepCopyObject().(Object)
		controllerutil.AddFinalizer(obj, Finalizer)
		err = r.Client.Patch(ctx, obj, mergeFromLocked(before))
	case health.ActionRemoveOwners, health.ActionSetOwner:
		err = r.fixOwners(ctx, obj, res, oos, req)
	case health.ActionInstall:
		err = r.Releases.Install(ctx, req)
		r.record(obj, err, health.EventInstalled, "Install", "release %s/%s installed", req.Namespace, req.Name)
	case health.ActionUninstallFailed:
		// A failed change of a release that ran is rolled back to the
		// revision that ran, which keeps running (as Flux remediates a
		// failed upgrade): uninstalling every kind here is an outage, a
		// device plugin's node losing its devices and a LAS's its
		// attestation, and installing the same spec again fails again.
		revision, rerr := r.Releases.Rollback(ctx, req.Namespace, req.Name)
		if !errors.Is(rerr, release.ErrNothingToRollBackTo) {
			if err = rerr; err != nil {
				r.record(obj, err, health.EventRolledBackFailedRelease, "Rollback", "")
				break
			}
			// A warning: the spec the user wrote does not run.
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, string(health.EventRolledBackFailedRelease), "Rollback",
				"a change of release %s/%s failed (%s): rolled back to revision %d, which keeps running; the change is not tried again until the spec or the operator's chart changes",
				req.Namespace, req.Name, conditionMessage(res.Conditions, health.ReleaseFailed), revision)
			break
		}
		// Nothing ever ran: installing again is no outage.
		err = r.Releases.Uninstall(ctx, req.Namespace, req.Name)
		r.record(obj, err, health.EventUninstalledFailedRelease, "Uninstall", "failed release %s/%s uninstalled, to be installed again", req.Namespace, req.Name)
	case health.ActionUpgrade:
		err = r.Releases.Upgrade(ctx, req)
		r.record(obj, err, health.EventUpgraded, "Upgrade", "release %s/%s upgraded: spec rolled out, drift repaired", req.Namespace, req.Name)
	default:
		return ctrl.Result{}, fmt.Errorf("unknown action %v", res.Action)
	}
	if apierrors.IsConflict(err) && patchesObjects(res.Action) {
		// Acted on a stale copy: our own write has not reached the cache
		// yet. Look again once it has, without taking the action twice.
		// (A Helm action's conflict is an error like any other: it backs
		// off instead of retrying every 200 ms.)
		logger.V(1).Info("stale object, looking again", "error", err.Error())
		return ctrl.Result{RequeueAfter: actedRecheck}, nil
	}
	if err != nil {
		logger.Error(err, "action failed")
		return ctrl.Result{}, err // controller-runtime backs off
	}
	logger.V(1).Info("action taken", "target", res.Target)
	return again, nil
}

// patchesObjects says whether an action is a patch of the CR or an owned
// object with the resourceVersion that was read.
func patchesObjects(a health.Action) bool {
	switch a {
	case health.ActionAddFinalizer, health.ActionRemoveFinalizer, health.ActionRemoveOwners, health.ActionSetOwner:
		return true
	}
	return false
}

// record emits an Event for a completed (or failed) action.
func (r *Reconciler) record(obj Object, err error, reason health.Reason, action, format string, args ...any) {
	if err != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, string(reason)+health.EventFailedSuffix, action, "%v", err)
		return
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, string(reason), action, format, args...)
}

func (r *Reconciler) deletionTimeout() time.Duration {
	if r.DeletionTimeout > 0 {
		return r.DeletionTimeout
	}
	return DefaultDeletionTimeout
}

func (r *Reconciler) deletionTimedOut(obj Object) bool {
	ts := obj.GetDeletionTimestamp()
	return ts != nil && r.now().Sub(ts.Time) > r.deletionTimeout()
}

func (r *Reconciler) removeFinalizer(ctx context.Context, obj Object) error {
	before := obj.DeepCopyObject().(Object)
	if !controllerutil.RemoveFinalizer(obj, Finalizer) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, obj, mergeFromLocked(before)))
}

// mergeFromLocked patches only the object as it was read: a reconcile
// working from a cache that has not seen the last write gets a conflict
// instead of repeating that write (and its event).
func mergeFromLocked(before Object) client.Patch {
	return client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
}

// fixOwners makes the CR the target object's sole controller owner: action
// 4 drops the other owners, action 5 adds the CR.
func (r *Reconciler) fixOwners(ctx context.Context, obj Object, res health.Result, oos []Owned, req release.Request) error {
	var oo *Owned
	for i := range oos {
		if oos[i].ID == res.Target {
			oo = &oos[i]
		}
	}
	if oo == nil || oo.Live == nil {
		return nil // gone meanwhile: the next pass sees it
	}
	var owners []metav1.OwnerReference
	for _, o := range oo.Live.GetOwnerReferences() {
		if o.UID == obj.GetUID() {
			owners = append(owners, o)
		}
	}
	if res.Action == health.ActionSetOwner && len(owners) == 0 {
		owners = []metav1.OwnerReference{req.Owner}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": owners, "resourceVersion": oo.Live.GetResourceVersion()}})
	if err != nil {
		return err
	}
	target := oo.Live.DeepCopy()
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting owners of %s: %w", oo.ID, err)
	}
	reason := health.EventRemovedForeignOwners
	if res.Action == health.ActionSetOwner {
		reason = health.EventSetOwner
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, string(reason), "Update", "%s now has %s as its only owner", oo.ID, r.Kind.Name())
	return nil
}

// conditionMessage is the message of the condition of type t.
func conditionMessage(conds []metav1.Condition, t health.ConditionType) string {
	for _, c := range conds {
		if c.Type == string(t) {
			return c.Message
		}
	}
	return ""
}
