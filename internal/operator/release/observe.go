package release

import (
	"context"
	"encoding/json"
	"fmt"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Snapshot is what Observe found: the release conditions of the status table and
// the objects the release should contain.
type Snapshot struct {
	Exists, Steady, Failed, Deployed health.Observation
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
		obs.Exists, obs.Steady, obs.Failed, obs.Deployed = u, u, u, u
		return obs, nil
	}
	if rel == nil || rel.Info == nil {
		obs.Exists = health.Obs(health.False, health.ReasonReleaseNotFound, fmt.Sprintf("no release %s in namespace %s", req.Name, req.Namespace))
		no := health.Obs(health.Unknown, health.ReasonReleaseNotFound, "")
		obs.Steady, obs.Failed, obs.Deployed = no, no, no
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

	if obs.DeployedObjects, err = parseManifestIn(rel.Manifest, req.Namespace); err != nil {
		return nil, err
	}
	return obs, nil
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
