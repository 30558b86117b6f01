package release

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloister-cc/cloister/internal/health"
)

// Observation is what Observe found: the release conditions of seed 000 and
// the objects the release should contain.
type Observation struct {
	Exists, Steady, Failed, Deployed health.Observation
	// Revision is the latest revision's number, 0 without a release.
	Revision int
	// Desired are the objects the chart renders for the request.
	Desired []*unstructured.Unstructured
	// DeployedObjects are the objects of the latest revision's manifest.
	DeployedObjects []*unstructured.Unstructured
	// SpecChanged says the latest revision was rendered from another spec
	// than the request's: an upgrade is due even if no object drifted.
	SpecChanged bool
}

// Observe reads the release of req and renders what it should contain.
// An error reading the release makes the release conditions Unknown rather
// than failing: the status engine decides what that means.
func (m *Manager) Observe(ctx context.Context, req Request) (*Observation, error) {
	desired, err := m.Render(req)
	if err != nil {
		return nil, err
	}
	obs := &Observation{Desired: desired}
	cfg, err := m.actionConfig(req.Namespace)
	if err != nil {
		return nil, err
	}
	rel, err := m.latest(cfg, req.Name)
	if err != nil {
		u := health.Obs(health.Unknown, "ReleaseReadError", err.Error())
		obs.Exists, obs.Steady, obs.Failed, obs.Deployed = u, u, u, u
		return obs, nil
	}
	if rel == nil || rel.Info == nil {
		obs.Exists = health.Obs(health.False, "ReleaseNotFound", fmt.Sprintf("no release %s in namespace %s", req.Name, req.Namespace))
		no := health.Obs(health.Unknown, "ReleaseNotFound", "")
		obs.Steady, obs.Failed, obs.Deployed = no, no, no
		return obs, nil
	}
	obs.Revision = rel.Version
	st := rel.Info.Status
	detail := fmt.Sprintf("revision %d is %s", rel.Version, st)
	obs.Exists = health.Obs(health.True, "ReleaseFound", detail)

	stale := m.stale(rel)
	switch {
	case stale && st == rcommon.StatusPendingInstall:
		// Nothing was ever deployed: uninstall and install afresh.
		obs.Steady = health.Obs(health.True, "InterruptedInstall", detail+" since "+rel.Info.LastDeployed.String())
		obs.Failed = health.Obs(health.True, "InterruptedInstall", detail)
	case stale:
		// Upgrade marks it failed and upgrades again.
		obs.Steady = health.Obs(health.True, "InterruptedOperation", detail+" since "+rel.Info.LastDeployed.String())
		obs.Failed = health.Obs(health.False, "InterruptedOperation", detail)
	case st.IsPending() || st == rcommon.StatusUninstalling:
		obs.Steady = health.Obs(health.False, "ReleaseInTransition", detail)
		obs.Failed = health.Obs(health.False, "ReleaseInTransition", detail)
	default:
		obs.Steady = health.Obs(health.True, "ReleaseSteady", detail)
		if st == rcommon.StatusFailed {
			obs.Failed = health.Obs(health.True, "ReleaseFailed", rel.Info.Description)
		} else {
			obs.Failed = health.Obs(health.False, "ReleaseNotFailed", detail)
		}
	}
	if st == rcommon.StatusDeployed {
		obs.Deployed = health.Obs(health.True, "ReleaseDeployed", detail)
	} else {
		obs.Deployed = health.Obs(health.False, "ReleaseNotDeployed", detail)
	}

	if obs.DeployedObjects, err = parseManifestIn(rel.Manifest, req.Namespace); err != nil {
		return nil, err
	}
	obs.SpecChanged = !sameObjects(desired, obs.DeployedObjects)
	return obs, nil
}

// sameObjects compares two renderings object by object.
func sameObjects(a, b []*unstructured.Unstructured) bool {
	index := func(objs []*unstructured.Unstructured) map[string]string {
		m := make(map[string]string, len(objs))
		for _, o := range objs {
			data, _ := json.Marshal(o.Object) // map keys sorted: canonical
			m[o.GetAPIVersion()+"/"+o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = string(data)
		}
		return m
	}
	return maps.Equal(index(a), index(b))
}
