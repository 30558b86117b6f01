package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// DefaultClientPort is the CAS Service's client port unless spec.service
// says otherwise.
const DefaultClientPort = 8081

// CASNodePorts are the node ports of a NodePort CAS service.
type CASNodePorts struct {
	// +optional
	// +kubebuilder:validation:Minimum=30000
	// +kubebuilder:validation:Maximum=32767
	ClientPort int32 `json:"clientPort,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=30000
	// +kubebuilder:validation:Maximum=32767
	EnclavePort int32 `json:"enclavePort,omitempty"`
}

// CASSealing is where a restarted CAS finds its root seed.
type CASSealing string

// Sealing of the root seed.
const (
	CASSealingNode CASSealing = "Node"
	CASSealingNone CASSealing = "None"
)

// CASService is how CAS is exposed to its clients: the Service type and ports.
// +kubebuilder:validation:XValidation:rule="!has(self.nodePorts) || self.type == 'NodePort'",message="service.nodePorts needs service.type NodePort"
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancerIP) || self.type == 'LoadBalancer'",message="service.loadBalancerIP needs service.type LoadBalancer"
type CASService struct {
	// +optional
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;LoadBalancer;NodePort
	Type corev1.ServiceType `json:"type,omitempty"`
	// ClientPort serves clients: policy owners and workloads.
	// +optional
	// +kubebuilder:default=8081
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ClientPort int32 `json:"clientPort,omitempty"`
	// EnclavePort serves attesting enclaves.
	// +optional
	// +kubebuilder:default=18765
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	EnclavePort int32 `json:"enclavePort,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=45
	LoadBalancerIP string `json:"loadBalancerIP,omitempty"`
	// +optional
	NodePorts *CASNodePorts `json:"nodePorts,omitempty"`
	// Annotations are added to the CAS Service.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CASNetworkPolicy admits to CAS only the traffic it names, for clusters
// whose network plugin enforces NetworkPolicies.
type CASNetworkPolicy struct {
	// Enabled adds a NetworkPolicy selecting the CAS pod: it admits the
	// operator (which registers policies and reads CAS's state), the pods
	// of CAS's namespace, the peers in from, and, when the Service is a
	// NodePort or LoadBalancer, any source (CAS is exposed on purpose).
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// From are further peers admitted: the namespaces or pods of the
	// workloads and owners that use this CAS from elsewhere.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	From []networkingv1.NetworkPolicyPeer `json:"from,omitempty"`
}

// CASPersistence keeps CAS's volume on a PersistentVolumeClaim: its TLS
// certificate, its vendor collateral cache and, on SEV-SNP, its sealed
// seed. CAS's state itself (policies, secrets, CAs) is on the Kubernetes
// API, whatever this says.
type CASPersistence struct {
	// +optional
	// +kubebuilder:default=false
	Enabled bool `json:"enabled,omitempty"`
	// +optional
	// +kubebuilder:default=`/etc/cas/db`
	// +kubebuilder:validation:Pattern=`^/`
	MountPath string `json:"mountPath,omitempty"`
	// StorageClass of the claim; unset uses the default class, "-" disables
	// dynamic provisioning.
	// +optional
	StorageClass *string `json:"storageClass,omitempty"`
	// +optional
	// +kubebuilder:default={ReadWriteOnce}
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// +optional
	// +kubebuilder:default="1Gi"
	Size *resource.Quantity `json:"size,omitempty"`
}

// CASConfidentialVM runs CAS in a confidential VM: a pod of a confidential
// runtime class for SEV-SNP or TDX (Kata), where CAS vouches for its TLS
// key with the VM's own evidence, and clients trust it by the launch
// measurement its evidence must show and the host data of CAS's own pod
// policy (status.hostData), which no other pod of the runtime class has.
// +kubebuilder:validation:XValidation:rule="self.platform != 'tdx' || (has(self.rtmrs) && size(self.rtmrs) == 3)",message="a TDX CAS pins RTMR0 to RTMR2 (rtmrs: three of 96 hex digits): a TD with the same MRTD and another boot chain would be trusted otherwise"
// +kubebuilder:validation:XValidation:rule="self.platform != 'snp' || !has(self.rtmrs)",message="rtmrs are TDX's: an SEV-SNP VM's measurement covers its boot chain"
type CASConfidentialVM struct {
	// Platform is the VM's TEE: snp or tdx.
	// +kubebuilder:validation:Enum=snp;tdx
	Platform string `json:"platform"`
	// RuntimeClassName is the runtime class CAS's pod runs with: a
	// ConfidentialRuntime's status.runtimeClassName for the platform.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	RuntimeClassName string `json:"runtimeClassName"`
	// Measurement is the launch measurement CAS's evidence must show (SEV-SNP
	// MEASUREMENT or TDX MRTD of its VM), 96 hex digits: the operator, the
	// initializers and cloister --cluster trust CAS only by it.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{96}$`
	Measurement string `json:"measurement"`
	// RTMRs are the TD's RTMR0, RTMR1 and RTMR2 (firmware, kernel and
	// initrd, command line), 96 hex digits each: TDX only, required there.
	// +optional
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:Pattern=`^[0-9a-f]{96}$`
	RTMRs []string `json:"rtmrs,omitempty"`
}

// CASEnclaveSealing says which key of the enclave seals CAS's root seed.
type CASEnclaveSealing string

// Sealing keys of an SGX CAS.
const (
	// CASSealToMRENCLAVE: only this very enclave opens the seed; a new
	// version of CAS recovers from a ready peer or from its owners.
	CASSealToMRENCLAVE CASEnclaveSealing = "MRENCLAVE"
	// CASSealToMRSIGNER: every enclave of the same signer and product ID
	// opens it, later versions of CAS included (and earlier ones: the
	// owners choose upgrades without their shares over pinning).
	CASSealToMRSIGNER CASEnclaveSealing = "MRSIGNER"
)

// CASSGX runs CAS in an SGX enclave with Gramine, under the manifest its
// image ships (signed once per sealing key): CAS vouches for its TLS key
// with a DCAP quote, and clients trust it by the enclave's MRENCLAVE,
// which measures CAS, Gramine and the whole manifest (its command line
// included). The pod asks for an SGX enclave and the enclave's EPC, and
// runs on a node whose SGX plugin and AESM serve it.
type CASSGX struct {
	// MREnclave is the enclave's MRENCLAVE, 64 hex digits: cloister
	// reference-values compute --platform sgx --sigstruct on the image's
	// signed manifest (cloister-cas.sig, or cloister-cas-signer.sig with
	// sealing MRSIGNER) prints it. The operator, the initializers and
	// cloister --cluster trust CAS only by it.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	MREnclave string `json:"mrenclave"`
	// Sealing is the key CAS's root seed is sealed with, in its node's
	// slot of the state (with spec.sealing Node): MRENCLAVE (the default)
	// or MRSIGNER. Each is another signed manifest, so another
	// MRENCLAVE: the choice is measured, and no host can weaken it.
	// +optional
	// +kubebuilder:default=MRENCLAVE
	// +kubebuilder:validation:Enum=MRENCLAVE;MRSIGNER
	Sealing CASEnclaveSealing `json:"sealing,omitempty"`
}

// CASCollateral says where CAS fetches the vendor collateral hardware
// evidence is verified with, cached in its volume and refreshed before it
// goes out of date (served from the cache while the vendor fails, until
// its next update). Nothing fetched is trusted: every chain and signature
// is checked against the pinned vendor roots. Unset: no fetching; only
// evidence that carries its certificates verifies.
type CASCollateral struct {
	// PCS is Intel PCS (https://api.trustedservices.intel.com) or a PCCS:
	// TCB info, QE identity and CRLs for SGX and TDX evidence.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	PCS string `json:"pcs,omitempty"`
	// KDS is AMD KDS (https://kdsintf.amd.com) or a mirror: VCEKs that
	// SEV-SNP evidence does not carry, and CRLs.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	KDS string `json:"kds,omitempty"`
	// DCAPAPIKeySecret names a Secret in CAS's namespace whose key
	// dcap-api-key holds the Intel DCAP API key sent to PCS
	// (cloister install --dcap-api-file writes cloister-dcap-api).
	// Optional: PCS serves this collateral without a key.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	DCAPAPIKeySecret string `json:"dcapAPIKeySecret,omitempty"`
}

// CASSpec configures the configuration and attestation service (CAS): its
// image, exposure, persistence and the policies it serves.
// +kubebuilder:validation:XValidation:rule="!has(self.autoUpdate) || !self.autoUpdate",message="autoUpdate: CAS is never updated automatically: a new image is a new measurement, which its owners approve; name the new image in spec.image"
// +kubebuilder:validation:XValidation:rule="!(has(self.confidentialVM) && has(self.simulation) && self.simulation)",message="confidentialVM and simulation exclude each other: a CAS in a confidential VM never vouches for itself with simulated evidence"
// +kubebuilder:validation:XValidation:rule="!(has(self.sgx) && has(self.simulation) && self.simulation)",message="sgx and simulation exclude each other: a CAS in an enclave never vouches for itself with simulated evidence"
// +kubebuilder:validation:XValidation:rule="!(has(self.sgx) && has(self.confidentialVM))",message="sgx and confidentialVM exclude each other: CAS runs in one TEE"
// +kubebuilder:validation:XValidation:rule="!has(self.sgx) || !has(self.persistence) || !has(self.persistence.mountPath) || self.persistence.mountPath == '/etc/cas/db'",message="sgx: the enclave's manifest mounts CAS's volume at /etc/cas/db only; leave persistence.mountPath unset"
// +kubebuilder:validation:XValidation:rule="!has(self.sgx) || !has(self.sealing) || self.sealing == 'Node'",message="sgx: the enclave's manifest seals the seed in its node's slot (spec.sgx.sealing says under which key); sealing None is not offered in an enclave"
// +kubebuilder:validation:XValidation:rule="!has(self.sgx) || !has(self.collateral) || !has(self.collateral.dcapAPIKeySecret)",message="sgx: an enclave takes no DCAP API key file from the host (PCS serves collateral without one); remove collateral.dcapAPIKeySecret"
type CASSpec struct {
	common.ServiceSpec `json:",inline"`

	// +optional
	// +kubebuilder:default={}
	Service CASService `json:"service,omitempty"`
	// NetworkPolicy limits who reaches CAS.
	// +optional
	NetworkPolicy CASNetworkPolicy `json:"networkPolicy,omitempty"`
	// Persistence cannot change once CAS runs: its database would be left
	// behind on the old volume.
	// +optional
	// +kubebuilder:default={}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="persistence cannot change on an existing CAS: its database stays on the volume it has; to move it, back up the policies, delete this CAS and create it again with the new persistence, then recover"
	Persistence CASPersistence `json:"persistence,omitempty"`

	// Simulation runs CAS without a TEE: it vouches for its TLS key with
	// simulated evidence, and accepts simulated evidence from workloads
	// whose policy allows it. Insecure, for development only: without it,
	// CAS refuses simulated evidence from every workload.
	// +optional
	Simulation bool `json:"simulation,omitempty"`

	// ConfidentialVM runs CAS in a confidential VM, vouching for itself with
	// the VM's own evidence and its own pod policy (initdata). Its seed is
	// sealed to no node: a restarted replica gets it from a ready peer that
	// attests it, and after every replica stopped its recovery owners
	// recover it.
	// +optional
	ConfidentialVM *CASConfidentialVM `json:"confidentialVM,omitempty"`

	// SGX runs CAS in an SGX enclave (Gramine), vouching for itself with
	// DCAP quotes. With spec.sealing Node its seed is sealed in its node's
	// slot of the state under the enclave's sealing key, which only CAS's
	// enclave on that node's CPU derives; a replica on another node gets
	// it from a ready peer that attests it, and after every replica
	// stopped on nodes that lost their slots its recovery owners recover
	// it.
	// +optional
	SGX *CASSGX `json:"sgx,omitempty"`

	// Collateral says where vendor collateral is fetched from.
	// +optional
	Collateral *CASCollateral `json:"collateral,omitempty"`

	// Replicas of CAS, each serving attestations from the state they share
	// on the Kubernetes API; a replica started without the root seed gets
	// it from a ready peer that attests it as this CAS. 3 ride out the
	// loss of a node; on different nodes when the scheduler can.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	Replicas int32 `json:"replicas,omitempty"`

	// Sealing says whether a CAS pod started again unseals the root seed
	// by itself. Node (the default) seals it, in the state, under a key
	// of the pod's node: in an SGX enclave the enclave's sealing key
	// (spec.sgx.sealing); in simulation a key derived from CAS's
	// simulation key (insecure); nothing elsewhere, a confidential VM included
	// (SEV-SNP's derived key covers the launch measurement, which every
	// pod of CAS's runtime class shares, not the host data). None: after
	// every replica stopped, the recovery owners recover CAS (cloister cas
	// recover).
	// +optional
	// +kubebuilder:default=Node
	// +kubebuilder:validation:Enum=Node;None
	Sealing CASSealing `json:"sealing,omitempty"`

	// Backup exports CAS's state on a schedule into a volume, sealed as it
	// is stored: only the root seed, so the recovery owners' shares,
	// opens a backup. cloister cas restore brings one into a new CAS.
	// +optional
	Backup *CASBackup `json:"backup,omitempty"`

	// WitnessPolicy names the transparency-log witnesses CAS sends each
	// new checkpoint to for their cosignatures: a witness policy
	// ("witness NAME KEY URL", "group NAME N|any|all CHILD...", "quorum
	// NAME", the format of Sigsum and Tessera). It decides only whom CAS
	// asks: clients require cosignatures by their own copy of it (cloister
	// verify and generate --witness-policy). Not for CAS in SGX yet.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	WitnessPolicy string `json:"witnessPolicy,omitempty"`

	// SimulationKeys are PEM public keys whose simulated workload evidence
	// a simulated CAS takes besides its LAS nodes' (which the operator
	// publishes itself): e.g. a developer's key for cloister cas attest
	// --sim --sim-key. Each key named here can claim any pod's identity.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	SimulationKeys []string `json:"simulationKeys,omitempty"`
}

// CASBackup is a scheduled export of CAS's state.
type CASBackup struct {
	// Schedule of the backups, in cron syntax (a CronJob's schedule),
	// e.g. "0 3 * * *" for every night at three.
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=64
	Schedule string `json:"schedule"`

	// ClaimName is the PersistentVolumeClaim, in CAS's namespace, the
	// backups are written to. You make it, so that it outlives the CAS
	// resource, and keep a copy elsewhere.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ClaimName string `json:"claimName"`

	// Keep is how many backups stay in the volume: the oldest go once a
	// new one is written.
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Keep int32 `json:"keep,omitempty"`
}

// CASStatus reports CAS.
type CASStatus struct {
	common.ServiceStatus `json:",inline"`

	// Version is the CAS version observed in the CAS pod.
	// +optional
	Version string `json:"version,omitempty"`

	// CASState is CAS's own lifecycle state as CAS reports it:
	// uninitialized (run cloister cas init), recovery (run cloister cas
	// recover) or ready.
	// +optional
	CASState string `json:"casState,omitempty"`

	// InitializedAt is when the operator first saw CAS ready after an
	// init; the init token was used then, and the operator empties it and
	// never makes another. A CAS that is uninitialised again after it lost
	// its state says so, and only its recovery owners initialise it anew.
	// +optional
	InitializedAt *metav1.Time `json:"initializedAt,omitempty"`

	// HostData is the SHA-256 (hex) of the initdata of CAS's pods in a
	// confidential VM (their pod policy and the kata agent policy made
	// from it), which the VM's evidence shows as SEV-SNP HOST_DATA or TDX
	// MRCONFIGID: clients pin it beside spec.confidentialVM.measurement,
	// so no other pod of the runtime class is taken for CAS.
	// +optional
	HostData string `json:"hostData,omitempty"`

	// StateGeneration is the highest generation of CAS's state its
	// replicas reported serving (their high-water mark), since CAS was
	// last uninitialised. A replica refuses a state below its own mark and
	// says so (casStateAlert); a ready CAS below this one is rolled back.
	// +optional
	StateGeneration int64 `json:"stateGeneration,omitempty"`

	// LogCheckpoint is the largest checkpoint of CAS's transparency log
	// the operator saw (a signed note): a CAS that later shows a smaller
	// one, or one that does not extend it, is refused (CASLogRolledBack).
	// +optional
	LogCheckpoint string `json:"logCheckpoint,omitempty"`

	// CASStateAlert is 1 while a replica refuses CAS's state because it is
	// older than one CAS served (rolled back, an older backup restored) or
	// gone, until the recovery owners decide: 0 is desired.
	// +optional
	CASStateAlert int32 `json:"casStateAlert"`

	// SimulationKey is the PEM public key a simulated CAS signs its own
	// evidence with: the operator made it (its private half is only in
	// the CAS pod's Secret), and clients pin it to trust this CAS.
	// +optional
	SimulationKey string `json:"simulationKey,omitempty"`

	// SimulationKeys name (sha256:HEX) the keys whose simulated workload
	// evidence the running CAS takes, as CAS reports them: its LAS nodes'
	// and spec.simulationKeys, once they reached the pod.
	// +optional
	SimulationKeys []string `json:"simulationKeys,omitempty"`

	// Collateral is the state of the vendor collateral CAS caches
	// (spec.collateral), as CAS reports it.
	// +optional
	Collateral *CASCollateralStatus `json:"collateral,omitempty"`

	// CollateralAlert counts vendor collateral entries served stale from
	// CAS's cache or expired: 0 is desired, >0 alerts.
	// +optional
	CollateralAlert int32 `json:"collateralAlert"`

	// Replicas is how many CAS pods spec.replicas asks for.
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas hold the root seed and serve.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// RecoveringReplicas run without the root seed yet: they get it from
	// a ready peer, their node's slot of the state, or the recovery
	// owners (or wait for cloister cas init).
	// +optional
	RecoveringReplicas int32 `json:"recoveringReplicas"`

	// CASReplicaAlert counts the replicas spec.replicas asks for that are
	// not ready: 0 is desired, >0 alerts.
	// +optional
	CASReplicaAlert int32 `json:"casReplicaAlert"`

	// RootCA is the SHA-256 (hex) of the root CA certificate, as DER, that
	// CAS issues workload certificates under, once it is ready. Another
	// one means another CAS (initialised again): the operator registers
	// the policies that name this CAS again.
	// +optional
	RootCA string `json:"rootCA,omitempty"`

	// LastBackup is when the scheduled backup (spec.backup) last
	// succeeded.
	// +optional
	LastBackup *metav1.Time `json:"lastBackup,omitempty"`
}

// CASCollateralStatus is the state of CAS's vendor collateral cache.
type CASCollateralStatus struct {
	// Entries cached.
	Entries int32 `json:"entries"`
	// Stale entries are served from the cache while their vendor fails.
	// +optional
	Stale int32 `json:"stale,omitempty"`
	// Expired entries are past their next update: hardware evidence that
	// needs them is refused until the vendor answers.
	// +optional
	Expired int32 `json:"expired,omitempty"`
	// NextUpdate is the earliest next update of any entry.
	// +optional
	NextUpdate *metav1.Time `json:"nextUpdate,omitempty"`
}

// CAS runs the attestation and configuration service: it holds policies,
// attests workloads and gives them certificates and secrets.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=cas,singular=cas,categories=cloister
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Last Backup",type=date,JSONPath=`.status.lastBackup`,priority=1
// +kubebuilder:printcolumn:name="Simulation",type=boolean,JSONPath=`.spec.simulation`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CAS struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CASSpec   `json:"spec,omitempty"`
	Status CASStatus `json:"status,omitempty"`
}

// CASList is a list of CAS.
// +kubebuilder:object:root=true
type CASList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CAS `json:"items"`
}

func init() {
	register(&CAS{}, &CASList{})
}
