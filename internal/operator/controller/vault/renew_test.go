package vault

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A replica is replaced for a new certificate with a third of its
// lifetime left, one at a time, the one ending first, and only while
// every replica serves unsealed.
func TestRenewal(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	issued := func(ago, lasts time.Duration) *Health {
		h := unsealed("v-0", false)
		h.NotBefore, h.NotAfter = now.Add(-ago), now.Add(-ago+lasts)
		return h
	}
	pod := func(name string) *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	fresh, due, dueSooner := issued(time.Hour, 24*time.Hour), issued(17*time.Hour, 24*time.Hour), issued(20*time.Hour, 24*time.Hour)
	sealed := issued(20*time.Hour, 24*time.Hour)
	sealed.Sealed = true
	leaving := pod("v-2")
	leaving.DeletionTimestamp = &metav1.Time{Time: now}
	for _, tc := range []struct {
		name string
		rs   []Replica
		want string
	}{
		{"all fresh", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: fresh}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}, {Name: "v-2", Pod: pod("v-2"), Health: fresh}}, ""},
		{"one due", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: fresh}, {Name: "v-1", Pod: pod("v-1"), Health: due}, {Name: "v-2", Pod: pod("v-2"), Health: fresh}}, "v-1"},
		{"the one ending first", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: due}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}, {Name: "v-2", Pod: pod("v-2"), Health: dueSooner}}, "v-2"},
		{"another replica sealed", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: due}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}, {Name: "v-2", Pod: pod("v-2"), Health: sealed}}, ""},
		{"another replica unread", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: due}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}, {Name: "v-2"}}, ""},
		{"one on its way out", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: due}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}, {Name: "v-2", Pod: leaving, Health: fresh}}, ""},
		{"fewer than asked for", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: due}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}}, ""},
		{"validity unread", []Replica{{Name: "v-0", Pod: pod("v-0"), Health: unsealed("v-0", true)}, {Name: "v-1", Pod: pod("v-1"), Health: fresh}, {Name: "v-2", Pod: pod("v-2"), Health: fresh}}, ""},
	} {
		got, ok := Renewal(3, tc.rs, now)
		if ok != (tc.want != "") || got.Name != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, got.Name, ok, tc.want)
		}
	}
	// Expired already: still renewed (the replica serves no client now).
	if _, ok := Renewal(1, []Replica{{Name: "v-0", Pod: pod("v-0"), Health: issued(25*time.Hour, 24*time.Hour)}}, now); !ok {
		t.Error("an expired certificate is not renewed")
	}
}
