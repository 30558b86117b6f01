package vault

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

func unsealed(leader string, self bool) *Health {
	return &Health{Initialized: true, Version: "1.14.2", Leader: "https://" + leader + ".v-internal.ns.svc:8201", IsSelf: self}
}

func crashed(msg string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "v-0"}, Status: corev1.PodStatus{
		ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}}}}}
}

// Vault's own words when its transit seal fails at start (go-kms-wrapping
// encrypts a probe value in SetConfig), as its API client prints them.
const (
	sealRefused = "Error parsing Seal configuration: Error making API request.\n\nURL: PUT https://cas.ns.svc:8081/v1/transit/encrypt/vault-seal\nCode: 403. Errors:\n\n* identity: the client certificate is not of a service"
	sealNoKey   = "Error parsing Seal configuration: Error making API request.\n\nURL: PUT https://cas.ns.svc:8081/v1/transit/encrypt/vault-seal\nCode: 404. Errors:\n\n* not-found: transit key \"vault-seal\""
	sealDial    = "Error parsing Seal configuration: Put \"https://cas.ns.svc:8081/v1/transit/encrypt/vault-seal\": dial tcp 10.96.0.12:8081: connect: connection refused"
)

// The status engine's inputs for a Vault, case by case: each condition
// and the health it gives.
func TestJudge(t *testing.T) {
	type want struct {
		attested, initialized, unsealed, quorum metav1.ConditionStatus
		healthy                                 metav1.ConditionStatus
		reason                                  health.Reason
		ready                                   int32
	}
	T, F, U := health.True, health.False, health.Unknown
	cases := []struct {
		name string
		rs   []Replica
		want want
	}{
		{"three unsealed, one leader", []Replica{
			{Name: "v-0", Health: unsealed("v-0", true)}, {Name: "v-1", Health: unsealed("v-0", false)}, {Name: "v-2", Health: unsealed("v-0", false)},
		}, want{T, T, T, T, T, health.ReasonVaultReady, 3}},
		{"nothing answers yet", []Replica{{Name: "v-0", Err: errors.New("no pod")}, {Name: "v-1"}, {Name: "v-2"}},
			want{U, U, F, U, U, health.ReasonVaultStarting, 0}},
		{"answering, not initialised", []Replica{{Name: "v-0", Health: &Health{}}, {Name: "v-1", Health: &Health{}}, {Name: "v-2"}},
			want{T, F, F, U, U, health.ReasonVaultUninitialized, 0}},
		{"one sealed", []Replica{
			{Name: "v-0", Health: unsealed("v-0", true)}, {Name: "v-1", Health: unsealed("v-0", false)}, {Name: "v-2", Health: &Health{Initialized: true, Sealed: true}},
		}, want{T, T, F, F, U, health.ReasonVaultUnsealing, 2}},
		{"two leaders", []Replica{
			{Name: "v-0", Health: unsealed("v-0", true)}, {Name: "v-1", Health: unsealed("v-1", true)}, {Name: "v-2", Health: unsealed("v-0", false)},
		}, want{T, T, T, F, U, health.ReasonVaultNoQuorum, 0}},
		{"leader outside", []Replica{
			{Name: "v-0", Health: unsealed("x-9", false)}, {Name: "v-1", Health: unsealed("x-9", false)}, {Name: "v-2", Health: unsealed("x-9", false)},
		}, want{T, T, T, F, U, health.ReasonVaultNoQuorum, 0}},
		{"a stranger answers", []Replica{
			{Name: "v-0", Health: unsealed("v-0", true)}, {Name: "v-1", Untrusted: true}, {Name: "v-2", Health: unsealed("v-0", false)},
		}, want{F, T, F, F, F, health.ReasonVaultNotAttested, 2}},
		{"seal refused by CAS", []Replica{{Name: "v-0", Pod: crashed(sealRefused)}, {Name: "v-1"}, {Name: "v-2"}},
			want{U, U, F, U, F, health.ReasonSealRefused, 0}},
		{"transit key missing", []Replica{{Name: "v-0", Pod: crashed(sealNoKey)}, {Name: "v-1"}, {Name: "v-2"}},
			want{U, U, F, U, F, health.ReasonSealTransitKeyAbsent, 0}},
		{"CAS unreachable", []Replica{{Name: "v-0", Pod: crashed(sealDial)}, {Name: "v-1"}, {Name: "v-2"}},
			want{U, U, F, U, F, health.ReasonSealCASUnreachable, 0}},
		{"another crash", []Replica{{Name: "v-0", Pod: crashed("panic: runtime error")}, {Name: "v-1"}, {Name: "v-2"}},
			want{U, U, F, U, F, health.ReasonVaultCrashing, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Judge(3, c.rs)
			for typ, st := range map[health.ConditionType]metav1.ConditionStatus{
				health.VaultAttested: c.want.attested, health.VaultInitialized: c.want.initialized,
				health.VaultUnsealed: c.want.unsealed, health.VaultQuorum: c.want.quorum,
			} {
				if got := v.Conditions[typ].Status; got != st {
					t.Errorf("%s = %s (%s), want %s", typ, got, v.Conditions[typ].Message, st)
				}
			}
			if v.IsHealthy.Status != c.want.healthy || v.IsHealthy.Reason != c.want.reason {
				t.Errorf("IsHealthy = %s %s (%s), want %s %s", v.IsHealthy.Status, v.IsHealthy.Reason, v.IsHealthy.Message, c.want.healthy, c.want.reason)
			}
			if v.Ready != c.want.ready && c.want.healthy != F {
				t.Errorf("ready %d, want %d", v.Ready, c.want.ready)
			}
			// The status names the failure, never the container's words.
			for _, words := range []string{"Code: 4", "dial tcp", "URL:"} {
				if strings.Contains(v.IsHealthy.Message, words) {
					t.Errorf("IsHealthy message carries the log: %q", v.IsHealthy.Message)
				}
			}
		})
	}
}

func TestLeaderName(t *testing.T) {
	for in, want := range map[string]string{
		"https://v-0.v-internal.ns.svc:8201": "v-0", "http://v-1:8201": "v-1", "v-2": "v-2",
	} {
		if got := leaderName(in); got != want {
			t.Errorf("leaderName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The termination message is the end of a log the pod writes: any text
// yields one category, never a panic; one without Vault's seal context is
// never a seal's failure.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"", "Error parsing Seal configuration: Code: 404", "Seal configuration: Code: 403", "Seal configuration: dial tcp: i/o timeout", "panic: boom"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		got := classify(msg)
		if got < NoFailure || got > Crashed || (msg == "") != (got == NoFailure) ||
			(!strings.Contains(msg, sealContext) && got != Crashed && got != NoFailure) {
			t.Fatalf("%q: %d", msg, got)
		}
	})
}
