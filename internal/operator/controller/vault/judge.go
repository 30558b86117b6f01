package vault

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Health is what one replica's unauthenticated API says of itself
// (sys/health and sys/leader).
type Health struct {
	Initialized, Sealed, Standby bool
	Version                      string
	// Leader is the raft leader's address as the replica knows it;
	// IsSelf says the replica is that leader.
	Leader string
	IsSelf bool
	// NotBefore and NotAfter bound the certificate the replica serves
	// (from CAS, for its attested service); zero when not read.
	NotBefore, NotAfter time.Time
}

// Replica is what the operator learnt of one Vault pod.
type Replica struct {
	Name string
	// Pod is the replica's pod; nil when it does not exist.
	Pod *corev1.Pod
	// Health is the replica's answer over TLS trusted by CAS's root for
	// the Vault's name; nil when it gave none.
	Health *Health
	// Untrusted: the replica answered with a certificate CAS did not
	// issue to the Vault's service.
	Untrusted bool
	// Err is why the replica gave no answer (unreachable, refused).
	Err error
	// Recovery is the first replica's recovery bundle (its keys sealed
	// to the owners), read once Vault is initialised, or why not.
	Recovery    []byte
	RecoveryErr error
}

// Failure is why a replica's container last stopped, read from its
// termination message (the end of its log).
type Failure int

// Failures, judged from a container's last words.
const (
	NoFailure Failure = iota
	// SealCASUnreachable: Vault's seal did not reach CAS.
	SealCASUnreachable
	// SealRefused: CAS refused the seal's transit request (the client
	// certificate is not of the Vault's attested service).
	SealRefused
	// SealKeyMissing: the policy's service has no transit key of the
	// seal's name.
	SealKeyMissing
	// Crashed: the container stopped for another reason.
	Crashed
)

// sealContext is how Vault introduces a seal's failure at its start.
const sealContext = "Seal configuration"

// classify reads a Vault container's termination message. Only a
// category leaves this function: the message itself never reaches a
// status.
func classify(msg string) Failure {
	if msg == "" {
		return NoFailure
	}
	if !strings.Contains(msg, sealContext) {
		return Crashed
	}
	switch {
	case strings.Contains(msg, "Code: 404"):
		return SealKeyMissing
	case strings.Contains(msg, "Code: 403"), strings.Contains(msg, "Code: 401"):
		return SealRefused
	default:
		// Dial errors, timeouts and TLS errors: CAS was not reached as
		// the configuration names it.
		return SealCASUnreachable
	}
}

// failureOf is the failure of the Vault container's last stop, while it
// is not running again.
func failureOf(pod *corev1.Pod) Failure {
	if pod == nil {
		return NoFailure
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName || cs.State.Running != nil {
			continue
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
			return classify(t.Message)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return classify(t.Message)
		}
	}
	return NoFailure
}

// initFailed says whether the pod's initializer stopped in failure: it
// retries while CAS does not know the pod yet and gives up only when it
// cannot go on (CAS not trusted, its owners not as pinned).
func initFailed(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 && cs.State.Running == nil {
			return true
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return true
		}
	}
	return false
}

// Verdict is the judged state of a Vault.
type Verdict struct {
	Conditions map[health.ConditionType]health.Observation
	IsHealthy  health.Observation
	// Ready replicas are initialised, unsealed and agree on the leader;
	// Sealed ones answer sealed.
	Ready, Sealed int32
	Initialized   bool
	Leader        string
	Version       string
}

// Judge turns what was learnt of want replicas into the Vault's
// conditions and its health, naming a seal's failure and its fix.
func Judge(want int32, rs []Replica) Verdict {
	v := Verdict{Conditions: map[health.ConditionType]health.Observation{}}
	var answered, untrusted []string
	leaders := map[string]bool{}
	selfLeader := false
	var unsealed []Replica
	for _, r := range rs {
		switch {
		case r.Untrusted:
			untrusted = append(untrusted, r.Name)
		case r.Health != nil:
			answered = append(answered, r.Name)
			h := r.Health
			v.Version = h.Version
			v.Initialized = v.Initialized || h.Initialized
			if h.Sealed || !h.Initialized {
				v.Sealed++
				continue
			}
			unsealed = append(unsealed, r)
			if h.Leader != "" {
				leaders[h.Leader] = true
			}
			selfLeader = selfLeader || h.IsSelf
		}
	}
	if len(leaders) == 1 {
		for l := range leaders {
			v.Leader = leaderName(l)
		}
	}
	quorum := len(unsealed) > 0 && len(leaders) == 1 && selfLeader
	if quorum {
		v.Ready = int32(len(unsealed)) //nolint:gosec // at most spec.replicas (≤7)
	}

	// VaultAttested.
	switch {
	case len(untrusted) > 0:
		v.Conditions[health.VaultAttested] = health.Obs(health.False, health.ReasonVaultNotAttested,
			"replicas "+strings.Join(untrusted, ", ")+" serve a certificate CAS did not issue to the Vault's service")
	case len(answered) > 0:
		v.Conditions[health.VaultAttested] = health.Obs(health.True, "", "")
	default:
		v.Conditions[health.VaultAttested] = health.Obs(health.Unknown, health.ReasonVaultStarting, "no replica answers yet")
	}
	// VaultInitialized.
	switch {
	case v.Initialized:
		v.Conditions[health.VaultInitialized] = health.Obs(health.True, "", "")
	case len(answered) > 0:
		v.Conditions[health.VaultInitialized] = health.Obs(health.False, health.ReasonVaultUninitialized,
			"the first replica initialises Vault inside its TEE once it is unsealable")
	default:
		v.Conditions[health.VaultInitialized] = health.Obs(health.Unknown, health.ReasonVaultStarting, "no replica answers yet")
	}
	// VaultUnsealed.
	switch {
	case int32(len(unsealed)) >= want: //nolint:gosec // bounded by spec.replicas
		v.Conditions[health.VaultUnsealed] = health.Obs(health.True, "", "")
	default:
		v.Conditions[health.VaultUnsealed] = health.Obs(health.False, health.ReasonVaultUnsealing,
			fmt.Sprintf("%d of %d replicas serve unsealed", len(unsealed), want))
	}
	// VaultQuorum.
	switch {
	case quorum && int32(len(unsealed)) >= want: //nolint:gosec // bounded by spec.replicas
		v.Conditions[health.VaultQuorum] = health.Obs(health.True, "", "")
	case len(unsealed) == 0:
		v.Conditions[health.VaultQuorum] = health.Obs(health.Unknown, health.ReasonVaultUnsealing, "no replica serves unsealed")
	default:
		v.Conditions[health.VaultQuorum] = health.Obs(health.False, health.ReasonVaultNoQuorum,
			fmt.Sprintf("%d unsealed replicas name %d leaders, %s among them", len(unsealed), len(leaders), yesNo(selfLeader)))
	}
	v.IsHealthy = healthOf(want, rs, v, untrusted)
	return v
}

func yesNo(b bool) string {
	if b {
		return "one"
	}
	return "none"
}

// leaderName is the host of a leader address (https://HOST:PORT), the
// replica's name before the first dot.
func leaderName(addr string) string {
	host := strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://")
	if i := strings.IndexAny(host, ".:"); i >= 0 {
		host = host[:i]
	}
	return host
}

// healthOf is the IsHealthy observation: a failure that needs a human
// first (UNHEALTHY, naming it and its fix), then what the Vault waits for
// (PENDING).
func healthOf(want int32, rs []Replica, v Verdict, untrusted []string) health.Observation {
	for _, f := range []struct {
		failure Failure
		reason  health.Reason
		fix     string
	}{
		{SealRefused, health.ReasonSealRefused, "CAS refused the seal's transit request: the replica's client certificate must be of the policy's Vault service (is the policy registered and the pod's identity in it?)"},
		{SealKeyMissing, health.ReasonSealTransitKeyAbsent, "the policy's Vault service has no transit key of the seal's name: sign and register the policy the Vault's status names"},
		{SealCASUnreachable, health.ReasonSealCASUnreachable, "Vault's seal did not reach CAS over TLS: is CAS running and ready, and its Service reachable from the Vault's namespace?"},
		{Crashed, health.ReasonVaultCrashing, "the Vault container stopped; kubectl logs --previous names why"},
	} {
		var names []string
		for _, r := range rs {
			if failureOf(r.Pod) == f.failure && r.Health == nil {
				names = append(names, r.Name)
			}
		}
		if len(names) > 0 {
			return health.Obs(health.False, f.reason, "replicas "+strings.Join(names, ", ")+": "+f.fix)
		}
	}
	if len(untrusted) > 0 {
		return health.Obs(health.False, health.ReasonVaultNotAttested, "replicas "+strings.Join(untrusted, ", ")+
			" serve a certificate CAS did not issue to the Vault's service: something else answers at the Vault's pods")
	}
	var initFailures []string
	for _, r := range rs {
		if initFailed(r.Pod) {
			initFailures = append(initFailures, r.Name)
		}
	}
	if len(initFailures) > 0 {
		return health.Obs(health.False, health.ReasonVaultInitFailed, "replicas "+strings.Join(initFailures, ", ")+
			": the initializer stopped before attesting to CAS (is CAS trusted as the CAS resource says, and the policy's owners the Vault's?); kubectl logs -c cloister-initializer names why")
	}
	switch {
	case v.Ready >= want:
		return health.Obs(health.True, health.ReasonVaultReady, fmt.Sprintf("%d replicas unsealed, leader %s", v.Ready, v.Leader))
	case !v.Initialized && v.Sealed == 0:
		var waiting []string
		for _, r := range rs {
			if r.Health == nil {
				waiting = append(waiting, r.Name)
			}
		}
		slices.Sort(waiting)
		return health.Obs(health.Unknown, health.ReasonVaultStarting, "waiting for replicas "+strings.Join(waiting, ", ")+
			" to attest to CAS and serve (the policy in the Vault's status must be signed by its owners and registered)")
	case !v.Initialized:
		return health.Obs(health.Unknown, health.ReasonVaultUninitialized, "the first replica initialises Vault inside its TEE")
	case v.Sealed > 0:
		return health.Obs(health.Unknown, health.ReasonVaultUnsealing, fmt.Sprintf("%d replicas sealed, unsealing through CAS", v.Sealed))
	}
	return health.Obs(health.Unknown, health.ReasonVaultNoQuorum, fmt.Sprintf("%d of %d replicas ready", v.Ready, want))
}
