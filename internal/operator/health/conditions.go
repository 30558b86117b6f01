// Package health is the status engine every service controller shares: it
// turns observations of a CR, its Helm release and its owned objects (OOs)
// into the conditions of the status table (docs/architecture.md), the CR's state and the single
// next action. It is pure: no client, no clock.
package health

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionType names a row of the table: a CR condition, or an owned
// object's (shown prefixed with the object's ID).
type ConditionType string

// Condition types of the CR (one each).
const (
	IsHealthy        ConditionType = "IsHealthy"
	DeletionPresent  ConditionType = "DeletionPresent"
	FinalizerPresent ConditionType = "FinalizerPresent"
	ReleaseExists    ConditionType = "ReleaseExists"
	ReleaseSteady    ConditionType = "ReleaseSteady"
	ReleaseFailed    ConditionType = "ReleaseFailed"
	ReleaseDeployed  ConditionType = "ReleaseDeployed"
	// ReleaseRolledBack: a change of a release that ran failed and was
	// rolled back; the revision before keeps running, and the change is
	// not tried again until the spec or the operator's chart changes.
	ReleaseRolledBack            ConditionType = "ReleaseRolledBack"
	AtLeastOneOwnedObjectPresent ConditionType = "AtLeastOneOwnedObjectPresent"
	AllOwnedObjectsPresent       ConditionType = "AllOwnedObjectsPresent"
)

// Registered is the one condition of a SignedPolicy or EncryptedPolicy:
// True when CAS holds the policy (HEALTHY), False when CAS refused it
// (UNHEALTHY), Unknown while CAS cannot be asked (PENDING).
const Registered ConditionType = "Registered"

// Conditions of a Vault, judged from its replicas: rows only a kind that
// observes them shows (after the CR's), so other kinds' tables are
// unchanged.
const (
	// VaultAttested: every running replica serves a TLS certificate CAS
	// issued to the Vault's service, which only an attested pod gets.
	VaultAttested ConditionType = "VaultAttested"
	// VaultInitialized: Vault was initialised (once, inside its TEE).
	VaultInitialized ConditionType = "VaultInitialized"
	// VaultUnsealed: every replica spec.replicas asks for serves
	// unsealed.
	VaultUnsealed ConditionType = "VaultUnsealed"
	// VaultQuorum: the replicas agree on one raft leader among them.
	VaultQuorum ConditionType = "VaultQuorum"
)

// kindConditions are the rows a kind adds, shown only when observed.
var kindConditions = []ConditionType{VaultAttested, VaultInitialized, VaultUnsealed, VaultQuorum}

// Condition types of each owned object; in the CR's status they are
// prefixed with the OO's ID.
const (
	OwnedObjectHealthy         ConditionType = "OwnedObjectHealthy"
	OwnedObjectPresent         ConditionType = "OwnedObjectPresent"
	OwnedObjectDeletionPresent ConditionType = "OwnedObjectDeletionPresent"
	OwnedObjectValidOwners     ConditionType = "OwnedObjectValidOwners"
	OwnsOwnedObject            ConditionType = "OwnsOwnedObject"
	SoleOwner                  ConditionType = "SoleOwner"
	EqualSpecs                 ConditionType = "EqualSpecs"
)

const (
	True    = metav1.ConditionTrue
	False   = metav1.ConditionFalse
	Unknown = metav1.ConditionUnknown
)

// conditionDef is one row group of the table: the value a healthy CR
// shows, whether the other known value makes the CR UNHEALTHY (rather than
// PENDING), and the table's explanation of each value.
type conditionDef struct {
	healthy   metav1.ConditionStatus
	unhealthy bool
	explain   map[metav1.ConditionStatus]string
}

// crConditions are the CR rows of the table, in the order they are shown.
var crConditions = []ConditionType{
	IsHealthy, DeletionPresent, FinalizerPresent, ReleaseExists, ReleaseSteady,
	ReleaseFailed, ReleaseDeployed, ReleaseRolledBack, AtLeastOneOwnedObjectPresent, AllOwnedObjectsPresent,
}

// ooConditions are the OO rows of the table, in the order they are shown.
var ooConditions = []ConditionType{
	OwnedObjectHealthy, OwnedObjectPresent, OwnedObjectDeletionPresent,
	OwnedObjectValidOwners, OwnsOwnedObject, SoleOwner, EqualSpecs,
}

var table = map[ConditionType]conditionDef{
	IsHealthy: {True, true, map[metav1.ConditionStatus]string{
		True: "The CR is healthy", False: "The CR is not healthy", Unknown: "Could not be determined"}},
	DeletionPresent: {False, false, map[metav1.ConditionStatus]string{
		True: "The CR is being deleted", False: "The CR has not been deleted", Unknown: "Could not be determined"}},
	FinalizerPresent: {True, false, map[metav1.ConditionStatus]string{
		True: "The CR has the CR controller as a finalizer", False: "The CR does not have the CR controller as a finalizer",
		Unknown: "Could not be determined"}},
	ReleaseExists: {True, false, map[metav1.ConditionStatus]string{
		True: "The helm release installing the OOs of the CR exists", False: "The helm release installing the OOs of the CR could not be found",
		Unknown: "The command retrieving the release returned an error of a different kind than a not-found error"}},
	ReleaseSteady: {True, false, map[metav1.ConditionStatus]string{
		True:    "The status of the release installing the OOs of the CR indicates that it is not about to change on its own",
		False:   "The status of the release installing the OOs of the CR indicates that it is in transition",
		Unknown: "Could not be determined"}},
	ReleaseFailed: {False, false, map[metav1.ConditionStatus]string{
		True: "The helm release installing the OOs of the CR is in Failed state", False: "The helm release installing the OOs of the CR is not in Failed state",
		Unknown: "Could not be determined"}},
	ReleaseDeployed: {True, false, map[metav1.ConditionStatus]string{
		True: "The helm release installing the OOs of the CR is in Deployed state", False: "The helm release installing the OOs of the CR is not in Deployed state",
		Unknown: "Could not be determined"}},
	ReleaseRolledBack: {False, true, map[metav1.ConditionStatus]string{
		True:    "A change of the CR failed and was rolled back: the revision before keeps running",
		False:   "No failed change of the CR was rolled back",
		Unknown: "Could not be determined"}},
	AtLeastOneOwnedObjectPresent: {True, false, map[metav1.ConditionStatus]string{
		True: "At least one OO of the CR exists", False: "No OO of the CR was found",
		Unknown: "Could not be determined due to failure retrieving the OOs"}},
	AllOwnedObjectsPresent: {True, false, map[metav1.ConditionStatus]string{
		True: "All OOs of the CR exist", False: "At least one OO of the CR was not found",
		Unknown: "Could not be determined due to failure retrieving the OOs"}},
	VaultAttested: {True, true, map[metav1.ConditionStatus]string{
		True: "Every running replica serves a certificate CAS issued to the Vault's attested service", False: "A replica serves no certificate of CAS for the Vault's service",
		Unknown: "Could not be determined"}},
	VaultInitialized: {True, false, map[metav1.ConditionStatus]string{
		True: "Vault is initialised", False: "Vault is not initialised yet", Unknown: "Could not be determined"}},
	VaultUnsealed: {True, false, map[metav1.ConditionStatus]string{
		True: "Every replica serves unsealed", False: "A replica is sealed or not serving", Unknown: "Could not be determined"}},
	VaultQuorum: {True, false, map[metav1.ConditionStatus]string{
		True: "The replicas agree on one raft leader among them", False: "The replicas do not agree on a raft leader among them",
		Unknown: "Could not be determined"}},
	OwnedObjectHealthy: {True, true, map[metav1.ConditionStatus]string{
		True: "The OO is healthy and matches the spec of the CR", False: "The OO is not healthy", Unknown: "Could not be determined"}},
	OwnedObjectPresent: {True, false, map[metav1.ConditionStatus]string{
		True: "The OO exists", False: "The OO does not exist",
		Unknown: "The command retrieving the OO returned an error of a different kind than a not-found error"}},
	OwnedObjectDeletionPresent: {False, false, map[metav1.ConditionStatus]string{
		True: "The OO has been deleted", False: "The OO has not been deleted", Unknown: "Could not be determined"}},
	OwnedObjectValidOwners: {True, false, map[metav1.ConditionStatus]string{
		True: "The OO has zero or one owner", False: "The OO has more than one owner", Unknown: "Could not be determined"}},
	OwnsOwnedObject: {True, false, map[metav1.ConditionStatus]string{
		True: "The OO has the CR as an owner", False: "The OO does not have the CR as an owner", Unknown: "Could not be determined"}},
	SoleOwner: {True, false, map[metav1.ConditionStatus]string{
		True: "The CR is the only owner of the OO", False: "The OO does not have exactly one owner, which is the CR",
		Unknown: "Could not be determined"}},
	EqualSpecs: {True, false, map[metav1.ConditionStatus]string{
		True: "No attribute of the OO contradicts the spec of the CR", False: "At least one attribute of the OO contradicts the spec of the CR",
		Unknown: "Could not be determined"}},
}
