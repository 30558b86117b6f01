package health

// Reason is the machine-readable reason of a condition or an event. The
// values are API: people alert on them, so they are defined here, once,
// and never reworded.
type Reason string

// Reasons of the CR's and owned objects' conditions.
const (
	// The CR.
	ReasonDeleting Reason = "Deleting"

	// The release (ReleaseExists, ReleaseSteady, ReleaseFailed, ReleaseDeployed,
	// ReleaseRolledBack).
	ReasonReleaseReadError     Reason = "ReleaseReadError"
	ReasonReleaseNotFound      Reason = "ReleaseNotFound"
	ReasonReleaseFound         Reason = "ReleaseFound"
	ReasonInterruptedInstall   Reason = "InterruptedInstall"
	ReasonInterruptedOperation Reason = "InterruptedOperation"
	ReasonReleaseInTransition  Reason = "ReleaseInTransition"
	ReasonReleaseSteady        Reason = "ReleaseSteady"
	ReasonReleaseFailed        Reason = "ReleaseFailed"
	ReasonReleaseNotFailed     Reason = "ReleaseNotFailed"
	ReasonReleaseDeployed      Reason = "ReleaseDeployed"
	ReasonReleaseNotDeployed   Reason = "ReleaseNotDeployed"
	ReasonReleaseRolledBack    Reason = "ReleaseRolledBack"
	ReasonReleaseNotRolledBack Reason = "ReleaseNotRolledBack"

	// The owned objects.
	ReasonOwnedObjects   Reason = "OwnedObjects"
	ReasonReadError      Reason = "ReadError"
	ReasonFound          Reason = "Found"
	ReasonNotFound       Reason = "NotFound"
	ReasonMissing        Reason = "Missing"
	ReasonNotInstalled   Reason = "NotInstalled"
	ReasonNotPresent     Reason = "NotPresent"
	ReasonOwners         Reason = "Owners"
	ReasonOwner          Reason = "Owner"
	ReasonNotInSpec      Reason = "NotInSpec"
	ReasonSpecChanged    Reason = "SpecChanged"
	ReasonDrifted        Reason = "Drifted"
	ReasonUnreadable     Reason = "Unreadable"
	ReasonRolloutPending Reason = "RolloutPending"
	ReasonPodsAvailable  Reason = "PodsAvailable"
	// ReasonPodsUnavailable: a DaemonSet's pods are not all available.
	ReasonPodsUnavailable Reason = "PodsUnavailable"

	// IsHealthy, judged by each kind.
	ReasonNoAlerts          Reason = "NoAlerts"
	ReasonNoNodes           Reason = "NoNodes"
	ReasonPluginNotDeployed Reason = "PluginNotDeployed"
	ReasonLASNotDeployed    Reason = "LASNotDeployed"
	ReasonSGXDeviceAlert    Reason = "SGXDeviceAlert"
	ReasonSGXReplicaAlert   Reason = "SGXReplicaAlert"
	ReasonCEXDeviceAlert    Reason = "CEXDeviceAlert"
	ReasonCEXReplicaAlert   Reason = "CEXReplicaAlert"
	ReasonLASReplicaAlert   Reason = "LASReplicaAlert"
	ReasonNitroDeviceAlert  Reason = "NitroDeviceAlert"
	ReasonNitroReplicaAlert Reason = "NitroReplicaAlert"
	// ReasonNitroAWSPluginConflict: AWS's Nitro Enclaves device plugin
	// runs on selected nodes; it registers the same resource.
	ReasonNitroAWSPluginConflict Reason = "NitroAWSPluginConflict"
	// ReasonLASNoEvidence: a node's LAS cannot produce evidence (no
	// simulation, no quoting stack).
	ReasonLASNoEvidence Reason = "LASNoEvidence"
	// A node's LAS cannot quote through its AESM: the socket does not
	// answer; AESM offers no ECDSA (DCAP) key; the platform is not
	// registered (no PCK certificate for its quoting enclave); AESM fails
	// otherwise.
	ReasonLASAESMUnreachable       Reason = "LASAESMUnreachable"
	ReasonLASNoECDSAKey            Reason = "LASNoECDSAKey"
	ReasonLASPlatformNotRegistered Reason = "LASPlatformNotRegistered"
	ReasonLASAESMError             Reason = "LASAESMError"
	// ConfidentialRuntime, judged from its node installers.
	ReasonRuntimeNotDeployed   Reason = "RuntimeNotDeployed"
	ReasonRuntimeInstalling    Reason = "RuntimeInstalling"
	ReasonRuntimeInstallFailed Reason = "RuntimeInstallFailed"
	// CAS, judged from its own API.
	ReasonCASUnreachable   Reason = "CASUnreachable"
	ReasonCASNotAttested   Reason = "CASNotAttested"
	ReasonCASUninitialized Reason = "CASUninitialized"
	// ReasonCASStateLost: uninitialised after it was initialised once.
	ReasonCASStateLost Reason = "CASStateLost"
	ReasonCASRecovery  Reason = "CASRecovery"
	// ReasonCASStateRolledBack: a replica refuses a state older than one
	// it served, until the recovery owners accept it.
	ReasonCASStateRolledBack Reason = "CASStateRolledBack"
	// ReasonCASStateReplaced: a replica refuses a state of another CAS
	// than the one it served (another seed).
	ReasonCASStateReplaced Reason = "CASStateReplaced"
	// ReasonCASLogRolledBack: CAS shows a transparency log smaller than,
	// or not extending, the checkpoint the operator saw before.
	ReasonCASLogRolledBack Reason = "CASLogRolledBack"
	ReasonCASReady         Reason = "CASReady"
	// ReasonCASCollateralStale: ready, with vendor collateral served from
	// the cache while the vendor fails.
	ReasonCASCollateralStale Reason = "CASCollateralStale"
	// ReasonCASCollateralExpired: cached vendor collateral is past its
	// next update and the vendor does not answer.
	ReasonCASCollateralExpired Reason = "CASCollateralExpired"
	// Policies, judged from their registration with CAS.
	ReasonCASAddress       Reason = "CASAddress"
	ReasonPolicyRegistered Reason = "PolicyRegistered"
	ReasonPolicyRefused    Reason = "PolicyRefused"
	// ReasonPolicyNamespace: named outside the resource's namespace.
	ReasonPolicyNamespace  Reason = "PolicyNamespace"
	ReasonPolicySuperseded Reason = "PolicySuperseded"
	ReasonCASNotReady      Reason = "CASNotReady"
	// NitroEnclaveDeployment, judged from its Deployment and enclave pods.
	ReasonDeploymentFailed  Reason = "DeploymentFailed"
	ReasonDeploymentMissing Reason = "DeploymentMissing"
	ReasonEnclavesStarting  Reason = "EnclavesStarting"
	ReasonEnclavesNotReady  Reason = "EnclavesNotReady"
	ReasonEnclavesReady     Reason = "EnclavesReady"
	// Vault, judged from its replicas' API and pods.
	ReasonVaultReady         Reason = "VaultReady"
	ReasonVaultStarting      Reason = "VaultStarting"
	ReasonVaultUninitialized Reason = "VaultUninitialized"
	ReasonVaultUnsealing     Reason = "VaultUnsealing"
	ReasonVaultNoQuorum      Reason = "VaultNoQuorum"
	ReasonVaultUnreachable   Reason = "VaultUnreachable"
	ReasonVaultNotAttested   Reason = "VaultNotAttested"
	ReasonVaultInitFailed    Reason = "VaultInitFailed"
	ReasonVaultCrashing      Reason = "VaultCrashing"
	// ReasonVaultRecoveryPending: initialised, its sealed recovery keys
	// not yet kept in their Secret.
	ReasonVaultRecoveryPending Reason = "VaultRecoveryPending"
	ReasonSealCASUnreachable   Reason = "SealCASUnreachable"
	ReasonSealRefused          Reason = "SealRefused"
	ReasonSealTransitKeyAbsent Reason = "SealTransitKeyMissing"
)

// Reasons of the events the reconciler emits: one per state change, one
// per action taken (the action's name with "Failed" when it failed).
const (
	EventHealthy   Reason = "Healthy"
	EventPending   Reason = "Pending"
	EventUnhealthy Reason = "Unhealthy"

	EventInstalled                Reason = "Installed"
	EventUpgraded                 Reason = "Upgraded"
	EventUninstalled              Reason = "Uninstalled"
	EventUninstalledFailedRelease Reason = "UninstalledFailedRelease"
	EventRolledBackFailedRelease  Reason = "RolledBackFailedRelease"
	EventUninstallTimedOut        Reason = "UninstallTimedOut"
	EventDraining                 Reason = "Draining"
	EventSetOwner                 Reason = "SetOwner"
	EventRemovedForeignOwners     Reason = "RemovedForeignOwners"
	// EventAutoUpdated: spec.autoUpdate moved the service to a newer image.
	EventAutoUpdated Reason = "AutoUpdated"
	// A policy's registration with CAS.
	EventRegistered Reason = "Registered"
	EventRefused    Reason = "Refused"
	// A NitroEnclaveDeployment's STATUS and its enclaves.
	EventScheduled        Reason = "Scheduled"
	EventDeploymentFailed Reason = "DeploymentFailed"
	EventEnclaveUnhealthy Reason = "EnclaveUnhealthy"
	// EventFailedSuffix follows an action's reason when it failed, e.g.
	// "InstalledFailed".
	EventFailedSuffix = "Failed"
)
