// Package initenv is the contract between generate and the initializer:
// the environment generate writes into the initializer's container (part
// of the pod's policy, so a host cannot change it) and the folders the
// initializer writes its results to, which the app containers and the mesh
// sidecar read. The node's LAS is found by the variables of package
// las/wire.
package initenv

// EnvPrefix starts every variable of the initializer's environment: a
// premain drops them before it becomes the application.
const EnvPrefix = "CLOISTER_"

// The initializer's environment, as generate writes it.
const (
	EnvCAS    = "CLOISTER_CAS"
	EnvExpect = "CLOISTER_CAS_EXPECT"
	// EnvCASSimKey is the PEM public key a simulated CAS signs its own
	// evidence with, for an expectation that allows simulation.
	EnvCASSimKey = "CLOISTER_CAS_SIM_KEY"
	// EnvPolicyOwners names (fingerprints, comma-separated) the owners
	// of the manifest the pod was made for, or NoOwners: a policy of its
	// name owned by anyone else gives the pod nothing.
	EnvPolicyOwners = "CLOISTER_POLICY_OWNERS"
	// EnvPolicyOwnerThreshold is how many of EnvPolicyOwners sign a
	// change of the manifest the pod was made for; a policy of its name
	// that fewer of them change gives the pod nothing.
	EnvPolicyOwnerThreshold = "CLOISTER_POLICY_OWNER_THRESHOLD"
	EnvPolicy               = "CLOISTER_POLICY"
	EnvService              = "CLOISTER_SERVICE"
	// EnvEvidence says where the pod's evidence comes from: EvidenceGuest
	// (its confidential VM's own), EvidenceSGX (its SGX enclave's own) or
	// EvidenceLAS (its node's LAS, the default). Generate sets it from the
	// platform.
	EnvEvidence = "CLOISTER_EVIDENCE"
	// EnvGramine moves Gramine's attestation folder (default
	// /dev/attestation) for EvidenceSGX.
	EnvGramine = "CLOISTER_GRAMINE"
	// EnvTSM moves configfs-tsm's folder (default /sys/kernel/config/tsm).
	EnvTSM = "CLOISTER_TSM"
	// EnvInsecureTestRoots is PEM test roots CAS's evidence may chain to:
	// insecure, for fake confidential VMs only (generate
	// --insecure-test-roots).
	EnvInsecureTestRoots = "CLOISTER_INSECURE_TEST_ROOTS"
	// EnvWitnessPolicy is the witness policy (its text) whose
	// cosignatures of CAS's transparency log the pod requires, made
	// within EnvWitnessMaxAge (a Go duration; default 2h): a CAS whose
	// state was rolled back gets no new ones.
	EnvWitnessPolicy = "CLOISTER_WITNESS_POLICY"
	EnvWitnessMaxAge = "CLOISTER_WITNESS_MAX_AGE"
	// EnvLogMemory, when set, is a file on a volume that outlives the
	// pod where the initializer keeps the largest checkpoint of CAS's log
	// it saw, and refuses a smaller or forked one.
	EnvLogMemory = "CLOISTER_LOG_MEMORY"
)

// Where a pod's evidence comes from (EnvEvidence).
const (
	EvidenceLAS   = "las"
	EvidenceGuest = "guest"
	// EvidenceSGX: the initializer runs inside the workload's SGX enclave
	// (a Gramine premain) and attests with the enclave's own evidence:
	// Gramine's quote, or its REPORT quoted by the node's LAS.
	EvidenceSGX = "sgx"
)

// NoOwners is EnvPolicyOwners for an owner-less (immutable) manifest.
const NoOwners = "none"

const (
	// SecretsPath is where the shared in-memory volume is mounted in
	// every container of the pod.
	SecretsPath = "/cloister"
	// DefaultOut is where the results go: Contrast's tls-config folder
	// on the shared volume.
	DefaultOut = SecretsPath + "/tls-config"
)

// FilesGroup is the group the initializer runs with unless the pod sets
// one (its image's, 65532). Generate adds it to the pod's
// supplementalGroups, and the initializer leaves its files readable by
// it: every container of the pod reads them, as whatever user it runs,
// and no other pod can reach the pod's in-memory volume.
const FilesGroup = 65532
