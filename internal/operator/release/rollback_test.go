package release

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A change that fails is rolled back to the last deployed revision, whose
// objects keep running; the rollback is seen as such while the request is
// that change, and no longer once its values or its chart change. A
// release that never deployed has nothing to roll back to.
func TestFailedChangeRolledBack(t *testing.T) {
	m, cs, req := setup(t)
	ctx := context.Background()
	if err := m.Install(ctx, req); err != nil {
		t.Fatal(err)
	}
	want(t, "ReleaseRolledBack after install", mustObserve(t, m, req).RolledBack, "False")

	bad := req
	bad.Values = map[string]any{"image": "example.com/las:2", "hostPort": 700000} // the API server refuses the port
	if err := m.Upgrade(ctx, bad); err == nil {
		t.Fatal("an upgrade to an invalid port succeeded")
	}
	obs := mustObserve(t, m, bad)
	want(t, "ReleaseFailed after the failed change", obs.Failed, "True")
	rev, err := m.Rollback(ctx, "ops", "las-test")
	if err != nil || rev != 1 {
		t.Fatalf("rollback: revision %d, %v", rev, err)
	}
	obs = mustObserve(t, m, bad)
	want(t, "ReleaseFailed after the rollback", obs.Failed, "False")
	want(t, "ReleaseDeployed after the rollback", obs.Deployed, "True")
	want(t, "ReleaseRolledBack for the failed change", obs.RolledBack, "True")
	if !strings.Contains(obs.RolledBack.Message, "revision 2, which this spec made, failed") || !strings.Contains(obs.RolledBack.Message, "1 keeps running") {
		t.Errorf("rolled back: %q", obs.RolledBack.Message)
	}
	ds, err := cs.AppsV1().DaemonSets("ops").Get(ctx, "las-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := ds.Spec.Template.Spec.Containers[0]; c.Image != "example.com/las:1" || c.Ports[0].HostPort != 18766 {
		t.Errorf("after the rollback the DaemonSet runs %s on port %d, want the last deployed revision's", c.Image, c.Ports[0].HostPort)
	}
	// A new chart (a new operator's) is tried again, as Flux does.
	newChart := bad
	newChart.Chart = withTemplateComment(t, bad.Chart)
	want(t, "ReleaseRolledBack for a new chart", mustObserve(t, m, newChart).RolledBack, "False")
	// A corrected spec is a new change.
	fixed := req
	fixed.Values = map[string]any{"image": "example.com/las:2", "hostPort": 18767}
	want(t, "ReleaseRolledBack for a corrected spec", mustObserve(t, m, fixed).RolledBack, "False")
	if err := m.Upgrade(ctx, fixed); err != nil {
		t.Fatal(err)
	}

	// Nothing deployed, nothing to roll back to.
	other := req
	other.Name = "las-never"
	other.Values = bad.Values
	if err := m.Install(ctx, other); err == nil {
		t.Fatal("an install with an invalid port succeeded")
	}
	if _, err := m.Rollback(ctx, "ops", "las-never"); !errors.Is(err, ErrNothingToRollBackTo) {
		t.Errorf("rolling back a release that never deployed: %v", err)
	}
}

// withTemplateComment is a copy of ch whose first template says one more
// thing, as the next operator's chart might.
func withTemplateComment(t *testing.T, ch *chart.Chart) *chart.Chart {
	t.Helper()
	c := *ch
	c.Templates = slices.Clone(ch.Templates)
	first := *c.Templates[0]
	first.Data = append(slices.Clip(first.Data), []byte("\n# changed by a newer operator\n")...)
	c.Templates[0] = &first
	return &c
}
