package cas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Evidence that is not what the resource expects: the fix named is its
// TEE's.
func TestJudgeNamesTheTEEsFix(t *testing.T) {
	mismatch := Probe{Err: fmt.Errorf("attesting: %w", attest.Reject(attest.CheckIdentity, "MRENCLAVE is cb.., want ca.."))}
	for tee, says := range map[string]string{teeSGX: "spec.sgx.mrenclave", teeVM: "spec.confidentialVM.measurement", teeNone: "spec.simulation"} {
		got := judge(conn.Ref{Namespace: "team", Name: "cas", Port: 8081}, tee, true, nil, 0, mismatch)
		if got.Reason != health.ReasonCASNotAttested || !strings.Contains(got.Message, says) || !strings.Contains(got.Message, "MRENCLAVE is cb..") {
			t.Errorf("%q: %s %s, want it to name %s", tee, got.Reason, got.Message, says)
		}
	}
	for c, want := range map[*servicesv1beta1.CAS]string{
		casCR(nil): teeNone,
		casCR(func(c *servicesv1beta1.CAS) { c.Spec.SGX = &servicesv1beta1.CASSGX{} }):                       teeSGX,
		casCR(func(c *servicesv1beta1.CAS) { c.Spec.ConfidentialVM = &servicesv1beta1.CASConfidentialVM{} }): teeVM,
	} {
		if got := teeOf(c); got != want {
			t.Errorf("teeOf = %q, want %q", got, want)
		}
	}
}

func TestJudge(t *testing.T) {
	ref := conn.Ref{Namespace: "team", Name: "cas", Port: 8081}
	nextUpdate := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name        string
		persistent  bool
		initialized *metav1.Time
		probe       Probe
		status      metav1.ConditionStatus
		reason      health.Reason
		says        []string
	}{
		{"pod not running", true, nil, Probe{Err: fmt.Errorf("x: %w", conn.ErrNotRunning)}, health.Unknown, health.ReasonCASUnreachable, []string{"not running"}},
		{"connection refused", true, nil, Probe{Err: errors.New("dial tcp: connection refused")}, health.Unknown, health.ReasonCASUnreachable, []string{"connection refused"}},
		{"no evidence", true, nil, Probe{Err: fmt.Errorf("CAS x: %w", casclient.ErrNoEvidence)}, health.False, health.ReasonCASNotAttested, []string{"offers no evidence", "spec.simulation"}},
		{"simulated, not allowed", true, nil, Probe{Err: fmt.Errorf("attesting: %w", attest.Reject(attest.CheckSimulation, "simulated"))}, health.False, health.ReasonCASNotAttested, []string{"simulation: simulated"}},
		{"uninitialised", true, nil, Probe{State: wire.Uninitialized}, health.False, health.ReasonCASUninitialized, []string{"cloister cas init --cluster team/cas --recovery-owner OWNER.pub.pem"}},
		{"uninitialised, simulated", true, nil, Probe{State: wire.Uninitialized, Insecure: true}, health.False, health.ReasonCASUninitialized, []string{"cloister cas init --cluster team/cas --insecure-simulated-cas"}},
		{"recovery", true, nil, Probe{State: wire.RecoveryMode, StateReason: "no sealed seed"}, health.False, health.ReasonCASRecovery, []string{"no sealed seed", "cloister cas recover --cluster team/cas"}},
		{"ready", true, nil, Probe{State: wire.Ready}, health.True, health.ReasonCASReady, []string{"CAS is ready"}},
		{"ready, simulated", true, nil, Probe{State: wire.Ready, Insecure: true}, health.True, health.ReasonCASReady, []string{"insecure"}},
		{"ready, no persistence", false, nil, Probe{State: wire.Ready}, health.True, health.ReasonCASReady, []string{"a restart loses every policy"}},
		{"ready, collateral current", true, nil, Probe{State: wire.Ready, Collateral: &wire.CollateralHealth{Entries: 3}}, health.True, health.ReasonCASReady, []string{"CAS is ready"}},
		{"ready, collateral stale", true, nil, Probe{State: wire.Ready, Collateral: &wire.CollateralHealth{Entries: 3, Stale: 1, NextUpdate: &nextUpdate}}, health.True, health.ReasonCASCollateralStale,
			[]string{"1 vendor collateral entries are served from its cache", "until 2026-12-01T00:00:00Z"}},
		{"ready, collateral expired", true, nil, Probe{State: wire.Ready, Collateral: &wire.CollateralHealth{Entries: 3, Stale: 1, Expired: 1}}, health.False, health.ReasonCASCollateralExpired,
			[]string{"1 of its 3 vendor collateral entries are past their next update", "spec.collateral"}},
		{"uninitialised after it was initialised", false, &metav1.Time{Time: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}, Probe{State: wire.Uninitialized}, health.False, health.ReasonCASStateLost,
			[]string{"initialised at 2026-11-26T10:00:00Z and has lost its state", "a new CAS", "cloister cas init --cluster team/cas", "--approve-key FORMER-OWNER.pem", "cloister cas restore --cluster team/cas"}},
		{"lost, by CAS's own mark", true, nil, Probe{State: wire.Uninitialized, StateProblem: wire.ProblemLost}, health.False, health.ReasonCASStateLost,
			[]string{"initialised once and has lost its state", "--approve-key"}},
		{"removed under a running replica", true, nil, Probe{State: wire.RecoveryMode, StateProblem: wire.ProblemLost, StateReason: "the state was removed"}, health.False, health.ReasonCASStateLost,
			[]string{"the state was removed", "cloister cas restore --cluster team/cas", "--accept-generation"}},
		{"replaced", true, nil, Probe{State: wire.RecoveryMode, StateProblem: wire.ProblemReplaced, StateReason: "the state is another CAS's"}, health.False, health.ReasonCASStateReplaced,
			[]string{"another CAS's"}},
		{"rolled back", true, nil, Probe{State: wire.RecoveryMode, StateProblem: wire.ProblemRolledBack, StateReason: "the state is at generation 4, older than generation 9"}, health.False, health.ReasonCASStateRolledBack,
			[]string{"generation 4, older than generation 9", "--accept-generation GENERATION"}},
		{"ready below the generation it reported", true, nil, Probe{State: wire.Ready, Mark: &wire.StateMark{Generation: 3}}, health.False, health.ReasonCASStateRolledBack,
			[]string{"at generation 3, older than generation 7 it reported before"}},
		{"ready, its log rolled back", true, nil, Probe{State: wire.Ready, Mark: &wire.StateMark{Generation: 7}, LogProblem: errors.New("cas.cloister/log at size 1 is smaller than cas.cloister/log at size 3, seen before")}, health.False, health.ReasonCASLogRolledBack,
			[]string{"size 1 is smaller than", "size 3, seen before", "an older copy"}},
		{"ready at the generation it reported", true, nil, Probe{State: wire.Ready, Mark: &wire.StateMark{Generation: 7}}, health.True, health.ReasonCASReady, []string{"CAS is ready"}},
		{"unknown state", true, nil, Probe{State: "odd"}, health.Unknown, health.ReasonCASUnreachable, []string{`"odd"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(ref, teeNone, tt.persistent, tt.initialized, 7, tt.probe)
			if got.Status != tt.status || got.Reason != tt.reason {
				t.Errorf("%s/%s, want %s/%s", got.Status, got.Reason, tt.status, tt.reason)
			}
			for _, s := range tt.says {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not say %q", got.Message, s)
				}
			}
		})
	}
}

// The collateral alert field is exported as its gauge, which the chart's
// rules alert on (config/prometheus checks every alert field has one).
func TestCollateralAlert(t *testing.T) {
	k := &Kind{}
	c := &servicesv1beta1.CAS{}
	c.Status.Collateral = &servicesv1beta1.CASCollateralStatus{Entries: 4, Stale: 2, Expired: 1}
	c.Status.CollateralAlert = 3
	var alert *metrics.Sample
	for _, s := range k.Metrics(c) {
		if s.Field == "collateralAlert" {
			alert = &s
		}
	}
	if alert == nil || alert.Value != 3 {
		t.Fatalf("collateralAlert %+v, want 3", alert)
	}
	rules, err := os.ReadFile("../../../../charts/cloister-operator/files/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), metrics.MetricName("collateralAlert")+`{node=""} > 0`) {
		t.Errorf("no alert on %s", metrics.MetricName("collateralAlert"))
	}
}

func TestCountReplicas(t *testing.T) {
	pod := func(phase corev1.PodPhase, ready, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	for _, tt := range []struct {
		name              string
		pods              []*corev1.Pod
		ready, recovering int32
	}{
		{"none", nil, 0, 0},
		{"all ready", []*corev1.Pod{pod(corev1.PodRunning, true, false), pod(corev1.PodRunning, true, false)}, 2, 0},
		{"one recovering", []*corev1.Pod{pod(corev1.PodRunning, true, false), pod(corev1.PodRunning, false, false)}, 1, 1},
		{"pending and terminating count for neither", []*corev1.Pod{pod(corev1.PodPending, false, false), pod(corev1.PodRunning, true, true)}, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r, rec := countReplicas(tt.pods); r != tt.ready || rec != tt.recovering {
				t.Errorf("ready %d, recovering %d; want %d, %d", r, rec, tt.ready, tt.recovering)
			}
		})
	}
}

func TestLastBackupFromTheCronJob(t *testing.T) {
	if got := lastBackup(nil); got != nil {
		t.Errorf("no CronJob, last backup %v", got)
	}
	at := metav1.NewTime(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	cj := &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}, Status: batchv1.CronJobStatus{LastSuccessfulTime: &at}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cj)
	if err != nil {
		t.Fatal(err)
	}
	oos := []service.Owned{{ID: "x"}, {ID: "cj", Live: &unstructured.Unstructured{Object: u}}}
	if got := lastBackup(oos); got == nil || !got.Equal(&at) {
		t.Errorf("last backup %v, want %v", got, at)
	}
}

func TestRootCAFingerprint(t *testing.T) {
	der := []byte("not really DER, but hashed as given")
	sum := sha256.Sum256(der)
	got, err := RootCAFingerprint(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	if err != nil || got != hex.EncodeToString(sum[:]) {
		t.Errorf("fingerprint %q, %v", got, err)
	}
	if _, err := RootCAFingerprint("-----BEGIN PUBLIC KEY-----\nAA==\n-----END PUBLIC KEY-----\n"); err == nil {
		t.Error("a public key taken for a certificate")
	}
}
