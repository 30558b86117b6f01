package service

import (
	"slices"
	"testing"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// A failed change of a release that ran is rolled back (not
// uninstalled, the table's action, which is an outage for every kind): the
// revision before keeps running, the status and a warning event name the
// failure, and the change is not tried again until the spec changes. (A
// release that never ran is uninstalled: actions_test.go.)
func TestFailedChangeRolledBack(t *testing.T) {
	f := newFixture(t, "rollback")
	cr := f.newCR("rollback")
	f.converge(cr)
	mustPatch(t, f.client, cr, `{"spec":{"image":"example.com/test:2"}}`)
	f.converge(cr)
	if img := f.owned(cr).Data["image"]; img != "example.com/test:2" {
		t.Fatalf("revision 2 runs %q", img)
	}
	// Revision 2 failed (as a refused object would have made it), and the
	// spec still asks for it.
	f.setReleaseStatus(cr, rcommon.StatusFailed, 0)
	f.events.take()
	f.reconcile(cr)
	if rel := f.releaseOf(cr); rel == nil || rel.Info.Status != rcommon.StatusDeployed || rel.Version != 3 {
		t.Fatalf("after the failure: release %+v, want revision 3 rolling back", rel)
	}
	if cm := f.owned(cr); cm == nil || cm.Data["image"] != "example.com/test:1" {
		t.Fatalf("the last deployed revision does not run: %+v", cm)
	}
	if got := f.events.take(); !slices.Contains(got, corev1.EventTypeWarning+" "+string(health.EventRolledBackFailedRelease)) {
		t.Errorf("events %v, want a warning that the change was rolled back", got)
	}
	for range 3 {
		f.reconcile(cr)
	}
	if err := f.client.Get(f.ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
		t.Fatal(err)
	}
	if c := condition(t, cr, "", health.ReleaseRolledBack); c.Status != metav1.ConditionTrue || c.Reason != string(health.ReasonReleaseRolledBack) {
		t.Errorf("ReleaseRolledBack = %s (%s: %s)", c.Status, c.Reason, c.Message)
	}
	if rel := f.releaseOf(cr); rel.Version != 3 || f.owned(cr).Data["image"] != "example.com/test:1" {
		t.Errorf("the change was tried again: revision %d runs %q", rel.Version, f.owned(cr).Data["image"])
	}
	// A corrected spec is rolled out.
	mustPatch(t, f.client, cr, `{"spec":{"image":"example.com/test:3"}}`)
	f.converge(cr)
	if img := f.owned(cr).Data["image"]; img != "example.com/test:3" {
		t.Errorf("the corrected spec runs %q", img)
	}
}
