package service

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// A state-change event lists what is not as desired; the kind's own
// judgement carries its message, which says what a human should run.
func TestTroubles(t *testing.T) {
	conds := []metav1.Condition{
		{Type: string(health.ReleaseExists), Status: metav1.ConditionTrue, Reason: "ReleaseFound", Message: "ok"},
		{Type: string(health.IsHealthy), Status: metav1.ConditionFalse, Reason: string(health.ReasonCASUninitialized), Message: "run cloister cas init"},
		{Type: "statefulset.apps/cas.OwnedObjectHealthy", Status: metav1.ConditionFalse, Reason: "PodsUnavailable", Message: "0 of 1 pods ready"},
	}
	want := ": IsHealthy=False (CASUninitialized: run cloister cas init), statefulset.apps/cas.OwnedObjectHealthy=False (PodsUnavailable)"
	if got := troubles(conds); got != want {
		t.Errorf("troubles:\n got %q\nwant %q", got, want)
	}
	if got := troubles(conds[:1]); got != "" {
		t.Errorf("nothing wrong: %q", got)
	}
}
