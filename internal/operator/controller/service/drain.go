package service

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// DrainState is how far a Drainer's cleanup is.
type DrainState int

const (
	// DrainStart: the release must be rolled out with the values of the
	// CR being deleted (Kind.Release sees its deletionTimestamp).
	DrainStart DrainState = iota
	// Draining: rolled out, its pods are still at work.
	Draining
	// Drained: the release can go.
	Drained
)

// drain does the Drainer's step before uninstalling; wait says the
// uninstall must wait.
func (r *Reconciler) drain(ctx context.Context, obj Object, req release.Request, oos []Owned) (wait bool, err error) {
	d, ok := r.Kind.(Drainer)
	if !ok || r.deletionTimedOut(obj) {
		return false, nil
	}
	switch state, msg := d.Drain(ctx, obj, oos); state {
	case DrainStart:
		err = r.Releases.Upgrade(ctx, req)
		r.record(obj, err, health.EventDraining, "Delete", "release %s/%s rolled out in removal mode, to be uninstalled once its pods undid their work", req.Namespace, req.Name)
		return true, err
	case Draining:
		log.FromContext(ctx).V(1).Info("waiting for the removal rollout", "progress", msg)
		return true, nil
	}
	return false, nil
}
