// Package wire is what a workload needs to reach its node's LAS without
// linking the daemon: LAS's port, the environment a pod finds it by, and
// the evidence request and response.
package wire

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/attest"
)

// DefaultPort is LAS's hostPort, where workloads on its node look for it.
const DefaultPort = 18766

// The environment a pod finds its node's LAS by: the node's address (the
// kubelet fills it from status.hostIP) and LAS's URL, built from it. The
// admission webhook injects both into SGX pods and generate into the
// initializer, by the same names.
const (
	EnvNodeIP = "CLOISTER_NODE_IP"
	EnvAddr   = "CLOISTER_LAS_ADDR"
)

// PodEnv is the two variables, in the order the kubelet needs to expand
// $(CLOISTER_NODE_IP) in the second.
func PodEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: EnvNodeIP, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"}}},
		{Name: EnvAddr, Value: "http://$(" + EnvNodeIP + "):" + strconv.Itoa(DefaultPort)},
	}
}

// EvidenceRequest is POST /v1/evidence: what a workload asks for.
type EvidenceRequest struct {
	// ReportData (hex, up to 64 bytes) is bound into the evidence, e.g.
	// the SHA-256 of the key of the CSR the workload will send to CAS.
	ReportData attest.Bytes `json:"reportData"`
}

// EvidenceResponse carries the evidence, ready for attestation.
type EvidenceResponse struct {
	Type     attest.Type `json:"type"`
	Evidence []byte      `json:"evidence"` // base64 in JSON
}

// Status is GET /v1/status: whether LAS can serve evidence now and, when
// it cannot, which check fails and why. Its readiness probe (/readyz)
// follows it; the operator reads it to say why a node's LAS is not ready.
type Status struct {
	// Evidence is what LAS serves: EvidenceSimulated or EvidenceNone.
	Evidence string `json:"evidence"`
	Ready    bool   `json:"ready"`
	// Check is the failing check (CheckEvidence, CheckSGXDevice).
	Check  string `json:"check,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// What a LAS serves, and its checks.
const (
	EvidenceSimulated = "simulated"
	EvidenceNone      = "none"
	// EvidenceSGXDCAP: quotes of enclaves' REPORTs by the node's quoting
	// enclave, through its AESM.
	EvidenceSGXDCAP = "sgx-dcap"

	CheckEvidence  = "evidence"
	CheckSGXDevice = "sgx-device"
	// The AESM checks: its socket answers; it offers an ECDSA (DCAP)
	// attestation key; the platform is registered (the quoting enclave
	// has its PCK certificate); any other AESM error.
	CheckAESMSocket           = "aesm-socket"
	CheckECDSAKey             = "aesm-ecdsa-key"
	CheckPlatformRegistration = "platform-registration"
	CheckAESM                 = "aesm"
)

// TargetInfoResponse is GET /v1/sgx/target-info: the quoting enclave's
// TARGETINFO (512 bytes), which an enclave targets its REPORT at.
type TargetInfoResponse struct {
	TargetInfo []byte `json:"targetInfo"` // base64 in JSON
}

// QuoteRequest is POST /v1/sgx/quote: an enclave's REPORT (432 bytes)
// targeted at the quoting enclave; the response is an EvidenceResponse
// with its DCAP quote.
type QuoteRequest struct {
	Report []byte `json:"report"` // base64 in JSON
}

// NoEvidence is why a LAS with neither simulation nor the node's AESM
// serves nothing.
const NoEvidence = "this LAS cannot produce evidence: simulation is off (spec.simulation) and it has no AESM socket to quote SGX enclaves through"

// DCAPOnly is why a LAS that quotes through AESM refuses report data
// alone: only the enclave can produce the REPORT its quote signs.
const DCAPOnly = "this LAS quotes SGX enclaves through the node's AESM: an enclave GETs /v1/sgx/target-info, produces a REPORT targeted at it (EREPORT), and POSTs it to /v1/sgx/quote; report data alone cannot be quoted"
