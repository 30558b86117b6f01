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

	CheckEvidence  = "evidence"
	CheckSGXDevice = "sgx-device"
)

// NoEvidence is why a LAS without simulation serves nothing: quoting SGX
// enclaves through the node's DCAP stack is not built yet.
const NoEvidence = "this LAS cannot produce evidence: simulation is off (spec.simulation) and quoting SGX enclaves through the node's DCAP stack (AESM) is not supported yet"
