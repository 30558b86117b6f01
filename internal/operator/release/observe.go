package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Snapshot is what Observe found: the release conditions of the status table and
// the objects the release should contain.
type Snapshot struct {
	Exists, Steady, Failed, Deployed health.Observation
	// RolledBack: the latest revision rolled back a change to this very
	// request, which failed; the revision before it keeps running.
	RolledBack health.Observation
	// Desired are the objects the chart renders for the request.
	Desired []*unstructured.Unstructured
	// DeployedObjects are the objects of the latest revision's manifest.
	DeployedObjects []*unstructured.Unstructured
}

// Observe reads the release of req and renders what it should contain.
// An error reading the release makes the release conditions Unknown rather
// than failing: the status engine decides what that means.
func (m *Manager) Observe(ctx context.Context, req Request) (*Snapshot, error) {
	desired, err := m.Render(req)
	if err != nil {
		return nil, err
	}
	obs := &Snapshot{Desired: desired}
	cfg, err := m.actionConfig(req.Namespace)
	if err != nil {
		return nil, err
	}
	rel, err := m.latest(cfg, req.Name)
	if err != nil {
		u := health.Obs(health.Unknown, health.ReasonReleaseReadError, err.Error())
		obs.Exists, obs.Steady, obs.Failed, obs.Deployed, obs.RolledBack = u, u, u, u, u
		return obs, nil
	}
	if rel == nil || rel.Info == nil {
		obs.Exists = health.Obs(health.False, health.ReasonReleaseNotFound, fmt.Sprintf("no release %s in namespace %s", req.Name, req.Namespace))
		no := health.Obs(health.Unknown, health.ReasonReleaseNotFound, "")
		obs.Steady, obs.Failed, obs.Deployed = no, no, no
		obs.RolledBack = health.Obs(health.False, health.ReasonReleaseNotFound, "")
		return obs, nil
	}
	st := rel.Info.Status
	detail := fmt.Sprintf("revision %d is %s", rel.Version, st)
	obs.Exists = health.Obs(health.True, health.ReasonReleaseFound, detail)

	stale := m.stale(rel)
	switch {
	case stale && st == rcommon.StatusPendingInstall:
		// Nothing was ever deployed: uninstall and install afresh.
		obs.Steady = health.Obs(health.True, health.ReasonInterruptedInstall, detail+" since "+rel.Info.LastDeployed.String())
		obs.Failed = health.Obs(health.True, health.ReasonInterruptedInstall, detail)
	case stale:
		// Upgrade marks it failed and upgrades again.
		obs.Steady = health.Obs(health.True, health.ReasonInterruptedOperation, detail+" since "+rel.Info.LastDeployed.String())
		obs.Failed = health.Obs(health.False, health.ReasonInterruptedOperation, detail)
	case st.IsPending() || st == rcommon.StatusUninstalling:
		obs.Steady = health.Obs(health.False, health.ReasonReleaseInTransition, detail)
		obs.Failed = health.Obs(health.False, health.ReasonReleaseInTransition, detail)
	default:
		obs.Steady = health.Obs(health.True, health.ReasonReleaseSteady, detail)
		if st == rcommon.StatusFailed {
			obs.Failed = health.Obs(health.True, health.ReasonReleaseFailed, rel.Info.Description)
		} else {
			obs.Failed = health.Obs(health.False, health.ReasonReleaseNotFailed, detail)
		}
	}
	if st == rcommon.StatusDeployed {
		obs.Deployed = health.Obs(health.True, health.ReasonReleaseDeployed, detail)
	} else {
		obs.Deployed = health.Obs(health.False, health.ReasonReleaseNotDeployed, detail)
	}

	obs.RolledBack = m.rolledBack(cfg, rel, req)

	if obs.DeployedObjects, err = parseManifestIn(rel.Manifest, req.Namespace); err != nil {
		return nil, err
	}
	return obs, nil
}

// rolledBack says whether rel is the rollback of a failed change to
// req's very values and chart: then the change is not tried again until
// the values change (the spec is corrected) or the chart does (a new
// operator, as Flux tries a failed release again for a new chart), and
// the revision rolled back to keeps running.
func (m *Manager) rolledBack(cfg *action.Configuration, rel *helmrelease.Release, req Request) health.Observation {
	no := health.Obs(health.False, health.ReasonReleaseNotRolledBack, "")
	if rel.Info.Status != rcommon.StatusDeployed || !strings.HasPrefix(rel.Info.Description, rollbackPrefix) {
		return no
	}
	all, err := m.history(cfg, rel.Name)
	if err != nil {
		return health.Obs(health.Unknown, health.ReasonReleaseReadError, err.Error())
	}
	for _, r := range all {
		if r.Version == rel.Version-1 && r.Info.Status == rcommon.StatusFailed && sameValues(r.Config, req.Values) && sameChart(r.Chart, req.Chart) {
			return health.Obs(health.True, health.ReasonReleaseRolledBack, fmt.Sprintf(
				"revision %d, which this spec made, failed and was rolled back; %s keeps running: %s. Correct the spec to try again",
				r.Version, strings.TrimPrefix(rel.Info.Description, rollbackPrefix), r.Info.Description))
		}
	}
	return no
}

// sameValues compares chart values as stored (JSON) with a request's.
func sameValues(a, b map[string]any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(x) == string(y)
}

// sameChart says whether two charts render alike: the same templates and
// default values (an embedded chart keeps its version across operators).
func sameChart(a, b *chart.Chart) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Metadata == nil || b.Metadata == nil || a.Metadata.Version != b.Metadata.Version || !sameValues(a.Values, b.Values) ||
		len(a.Templates) != len(b.Templates) {
		return false
	}
	for i, t := range a.Templates {
		if t.Name != b.Templates[i].Name || !bytes.Equal(t.Data, b.Templates[i].Data) {
			return false
		}
	}
	return true
}

// Changed says whether an object of the latest revision (deployed) was
// rendered from another spec than the request's (desired); nil stands for
// an object only one of the two has. A changed object is due an upgrade
// even when nothing drifted in the cluster. Both are renderings of the
// same chart, so their canonical JSON is compared.
func Changed(desired, deployed *unstructured.Unstructured) bool {
	if desired == nil || deployed == nil {
		return desired != deployed
	}
	a, errA := json.Marshal(desired.Object) // map keys sorted: canonical
	b, errB := json.Marshal(deployed.Object)
	return errA != nil || errB != nil || string(a) != string(b)
}
