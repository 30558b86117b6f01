package cas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloister-cc/cloister/internal/attest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Probe is what the operator learnt from CAS's own API: an error reaching
// or attesting it, or its lifecycle state.
type Probe struct {
	Err         error
	State       wire.State
	StateReason string
	// StateProblem and Mark: the state is below the replica's high-water
	// mark (wire.ProblemRolledBack) or gone (wire.ProblemLost), and the
	// mark itself.
	StateProblem string
	Mark         *wire.StateMark
	// LogProblem: CAS's log does not extend the checkpoint seen before.
	LogProblem error
	// Insecure: CAS vouched for itself with simulated evidence.
	Insecure bool
	// Collateral is CAS's vendor collateral cache, when it has one.
	Collateral *wire.CollateralHealth
}

// countReplicas counts CAS pods that are ready (they hold the seed) and
// those running without being ready (recovering it, or waiting for an
// init); pods terminating or not running count for neither.
func countReplicas(pods []*corev1.Pod) (ready, recovering int32) {
	for _, p := range pods {
		switch {
		case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
		case service.PodReady(p):
			ready++
		default:
			recovering++
		}
	}
	return ready, recovering
}

// RootCAFingerprint names a root CA certificate (PEM) by the SHA-256 of
// its DER, as statuses show it.
func RootCAFingerprint(certPEM string) (string, error) {
	block, _ := pem.Decode([]byte(certPEM))
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("not a PEM certificate")
	}
	sum := sha256.Sum256(block.Bytes)
	return hex.EncodeToString(sum[:]), nil
}

// lastBackup is when the scheduled backup's CronJob last succeeded.
func lastBackup(oos []service.Owned) *metav1.Time {
	for _, oo := range oos {
		if oo.Live == nil || oo.Live.GetKind() != "CronJob" {
			continue
		}
		cj := &batchv1.CronJob{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(oo.Live.Object, cj) == nil {
			return cj.Status.LastSuccessfulTime
		}
	}
	return nil
}

// generation is a mark's generation as the status keeps it (int64).
func generation(m *wire.StateMark) int64 {
	if m == nil {
		return 0
	}
	return int64(min(m.Generation, math.MaxInt64))
}

// below says whether CAS reports a state below the generation the status
// recorded: a ready CAS so is rolled back, its replicas having lost their
// marks (restarted without their volumes) while the state went backwards.
func below(m *wire.StateMark, recorded int64) bool { return m != nil && generation(m) < recorded }

// The TEEs a CAS resource names, as judge tells them apart.
const (
	teeNone = ""
	teeSGX  = "sgx"
	teeVM   = "vm"
)

// untrustedFix says what to check when CAS's evidence is not what its
// resource expects.
func untrustedFix(tee string) string {
	switch tee {
	case teeSGX:
		return "spec.sgx.mrenclave must be the MRENCLAVE of the signed manifest in spec.image for spec.sgx.sealing (cloister reference-values compute --platform sgx --sigstruct cloister-cas.sig), on a node with SGX and Intel's aesmd"
	case teeVM:
		return "spec.confidentialVM.measurement (and on TDX rtmrs) must be CAS's VM's, on a node of its runtime class"
	}
	return "a CAS without a TEE can only run with spec.simulation: true, which is insecure"
}

// judge turns a probe into the IsHealthy observation, telling a human
// what to run when CAS waits for one.
func judge(ref conn.Ref, tee string, persistent bool, initialized *metav1.Time, recorded int64, p Probe) health.Observation {
	switch {
	case p.Err != nil && (errors.Is(p.Err, casclient.ErrNoEvidence) || attest.CheckOf(p.Err) != ""):
		return health.Obs(health.False, health.ReasonCASNotAttested, fmt.Sprintf("CAS cannot be trusted: %v (%s)", p.Err, untrustedFix(tee)))
	case p.Err != nil:
		return health.Obs(health.Unknown, health.ReasonCASUnreachable, p.Err.Error())
	}
	// How the CLI is to trust this CAS: a simulated one only when told.
	trust := ""
	if p.Insecure {
		trust = " --insecure-simulated-cas"
	}
	switch {
	case p.StateProblem == wire.ProblemRolledBack:
		return health.Obs(health.False, health.ReasonCASStateRolledBack, fmt.Sprintf(
			"a replica of CAS refuses its state: %s. Whoever writes CAS's CASStateRecord objects put back an older state; the recovery owners take it only by accepting its generation: "+
				"cloister cas recover --cluster %s%s --shares shares.json --key OWNER.pem --accept-generation GENERATION, or they restore a newer backup", p.StateReason, ref, trust))
	case p.StateProblem == wire.ProblemReplaced:
		return health.Obs(health.False, health.ReasonCASStateReplaced, fmt.Sprintf(
			"a replica of CAS refuses its state: %s. Whoever writes CAS's CASStateRecord objects put another CAS's state there, whose shares they may hold", p.StateReason))
	case p.StateProblem == wire.ProblemLost && p.State == wire.RecoveryMode:
		return health.Obs(health.False, health.ReasonCASStateLost, fmt.Sprintf(
			"a replica of CAS refuses its state: %s. Whoever writes CAS's CASStateRecord objects removed them; CAS serves nothing and registers nothing until its recovery owners decide: "+
				"they restore a backup (cloister cas restore --cluster %s) and recover CAS, accepting the backup's generation (cloister cas recover --cluster %s%s --accept-generation GENERATION)",
			p.StateReason, ref, ref, trust))
	case p.LogProblem != nil:
		return health.Obs(health.False, health.ReasonCASLogRolledBack, fmt.Sprintf(
			"CAS's transparency log is not the one the operator saw: %v. Its whole state was replaced by an older copy, or it shows another history; "+
				"check who wrote CAS's CASStateRecord objects, and whether its policies are the ones their owners last registered", p.LogProblem))
	case p.State == wire.Ready && below(p.Mark, recorded):
		return health.Obs(health.False, health.ReasonCASStateRolledBack, fmt.Sprintf(
			"CAS serves its state at generation %d, older than generation %d it reported before: its replicas restarted without the marks in their volumes while the state went backwards. "+
				"Check who wrote CAS's CASStateRecord objects, and whether its policies are the ones their owners last registered", p.Mark.Generation, recorded))
	}
	switch p.State {
	case wire.Uninitialized:
		if initialized != nil || p.StateProblem == wire.ProblemLost {
			since := "once"
			if initialized != nil {
				since = "at " + initialized.UTC().Format(time.RFC3339)
			}
			return health.Obs(health.False, health.ReasonCASStateLost, fmt.Sprintf(
				"CAS was initialised %s and has lost its state since (its CASStateRecord objects were deleted): its policies, secrets and CAs are gone, and its init token was used. "+
					"Its recovery owners restore a backup (cloister cas restore --cluster %s, then cloister cas recover --accept-generation), or sign an init of a new CAS, which workloads and clients must trust anew: "+
					"cloister cas init --cluster %s%s --recovery-owner OWNER.pub.pem --approve-key FORMER-OWNER.pem --out shares.json",
				since, ref, ref, trust))
		}
		return health.Obs(health.False, health.ReasonCASUninitialized, fmt.Sprintf(
			"CAS is not initialised: run cloister cas init --cluster %s%s --recovery-owner OWNER.pub.pem --out shares.json", ref, trust))
	case wire.RecoveryMode:
		return health.Obs(health.False, health.ReasonCASRecovery, fmt.Sprintf(
			"CAS is in recovery mode (%s): recovery owners run cloister cas recover --cluster %s%s --shares shares.json --key OWNER.pem until enough shares are in",
			p.StateReason, ref, trust))
	case wire.Ready:
		msg := "CAS is ready"
		if p.Insecure {
			msg += "; it runs with simulated evidence (insecure, development only)"
		}
		if !persistent {
			msg += "; without persistence its database lives in the pod: a restart loses every policy and secret, and CAS must be initialised again"
		}
		if col := p.Collateral; col != nil && col.Expired > 0 {
			return health.Obs(health.False, health.ReasonCASCollateralExpired, fmt.Sprintf(
				"%s, but %d of its %d vendor collateral entries are past their next update with no newer copy from the vendor: hardware evidence that needs them is refused. "+
					"Check that CAS reaches spec.collateral's PCS and KDS (egress, the DCAP API key), or give a PCCS or KDS mirror it reaches", msg, col.Expired, col.Entries))
		}
		if col := p.Collateral; col != nil && col.Stale > 0 {
			next := ""
			if col.NextUpdate != nil {
				next = " until " + col.NextUpdate.UTC().Format(time.RFC3339)
			}
			return health.Obs(health.True, health.ReasonCASCollateralStale, fmt.Sprintf(
				"%s; %d vendor collateral entries are served from its cache while the vendor fails, which attestation survives%s", msg, col.Stale, next))
		}
		return health.Obs(health.True, health.ReasonCASReady, msg)
	}
	return health.Obs(health.Unknown, health.ReasonCASUnreachable, fmt.Sprintf("CAS reports the unknown state %q", p.State))
}
