package service

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// setStatus puts the engine's result into obj's status. Conditions keep
// their lastTransitionTime unless their status changed, so an unchanged
// world produces an unchanged status (and no write).
func (r *Reconciler) setStatus(obj Object, res health.Result) {
	st := obj.GetServiceStatus()
	st.Conditions = mergeConditions(st.Conditions, res.Conditions, obj.GetGeneration(), metav1.NewTime(r.now()))
	st.State = res.State
	st.ObservedGeneration = obj.GetGeneration()
}

func mergeConditions(existing, computed []metav1.Condition, generation int64, now metav1.Time) []metav1.Condition {
	old := make(map[string]metav1.Condition, len(existing))
	for _, c := range existing {
		old[c.Type] = c
	}
	out := make([]metav1.Condition, len(computed))
	for i, c := range computed {
		c.ObservedGeneration = generation
		c.LastTransitionTime = now
		if prev, ok := old[c.Type]; ok && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		}
		out[i] = c
	}
	return out
}

// announceState emits one Event when the state changed, naming the
// conditions that are not as desired so a human knows where to look.
func (r *Reconciler) announceState(ctx context.Context, obj Object, prev common.State) {
	st := obj.GetServiceStatus()
	if st.State == prev || st.State == "" {
		return
	}
	eventType, reason := corev1.EventTypeNormal, health.EventHealthy
	switch st.State {
	case common.StatePending:
		reason = health.EventPending
	case common.StateUnhealthy:
		eventType, reason = corev1.EventTypeWarning, health.EventUnhealthy
	}
	r.Recorder.Eventf(obj, nil, eventType, string(reason), "StateChanged", "%s -> %s%s", orNone(prev), st.State, troubles(st.Conditions))
}

func orNone(s common.State) string {
	if s == "" {
		return "(new)"
	}
	return string(s)
}

// troubles lists conditions that are not at their desired value. The
// kind's own judgement (IsHealthy) comes with its message: it is the one
// that says what a human should do.
func troubles(conds []metav1.Condition) string {
	var list []string
	for _, c := range conds {
		if health.IsDesired(c) {
			continue
		}
		if c.Type == string(health.IsHealthy) && c.Message != "" {
			list = append(list, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
			continue
		}
		list = append(list, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		if len(list) == 5 {
			list = append(list, "...")
			break
		}
	}
	if len(list) == 0 {
		return ""
	}
	return ": " + strings.Join(list, ", ")
}
