// Package generate makes ordinary Kubernetes YAML confidential: in every
// pod template whose runtimeClassName is the placeholder (or a runtime
// class generate wrote before), it injects the initializer and its
// in-memory secrets volume, pins images to digests, rewrites the runtime
// class, checks the pod's memory resources and writes the pod's policy
// annotation; it reports each workload's policy digest for the CAS
// manifest. Rewriting works on the YAML nodes, so comments and everything
// it does not own stay as the user wrote them, and a second run changes
// nothing. SGX pods (sgx.go) are enclaves under their node's own runtime:
// they get the SGX device and EPC, and Gramine manifest lines that make
// the initializer their premain (gramine.go).
package generate

import (
	"fmt"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// Names the rewritten YAML uses, defined once.
const (
	// Placeholder is the runtimeClassName that marks a confidential pod.
	Placeholder = runtimeclass.Prefix
	// SkipInitializerAnnotation on a pod template ("true") keeps generate
	// from injecting the initializer into it.
	SkipInitializerAnnotation = "cloister.dev/skip-initializer"
	// WorkloadSecretIDAnnotation on a pod template names its workload
	// secret (the manifest service's workloadSecretID): pods that name the
	// same id share the secret, and it stays while the id does. Without
	// it, the id is the workload's service name.
	WorkloadSecretIDAnnotation = "cloister.dev/workload-secret-id" //nolint:gosec // G101: an annotation's name, no credential
	// ContrastWorkloadSecretIDAnnotation is Contrast's name for it, read
	// as an alias.
	ContrastWorkloadSecretIDAnnotation = "contrast.edgeless.systems/workload-secret-id"
	InitializerName                    = "cloister-initializer"
	SecretsVolume                      = "cloister-secrets"
)

// podPaths are where each kind keeps its pod template's metadata and spec.
var podPaths = map[string][]string{
	"Pod":                   nil,
	"Deployment":            {"spec", "template"},
	"StatefulSet":           {"spec", "template"},
	"DaemonSet":             {"spec", "template"},
	"ReplicaSet":            {"spec", "template"},
	"ReplicationController": {"spec", "template"},
	"Job":                   {"spec", "template"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template"},
}

// Workload is a confidential pod template generate rewrote.
type Workload struct {
	Kind, Namespace, Name string
	// Service is its name in the CAS manifest.
	Service string
	// Digest identifies its pod policy (hex SHA-256 of the initdata);
	// Policy is the policy's canonical JSON.
	Digest string
	Policy []byte
	// MemoryMiB is the confidential VM's memory: the containers' limits
	// plus the runtime class overhead (init containers not counted).
	MemoryMiB int64
	// SecretID is the id its WorkloadSecretIDAnnotation names; empty
	// without one (WorkloadSecretID says what then).
	SecretID string
	// Labels of its pods, to find the Services that select them.
	Labels   map[string]string
	Warnings []string
	// Forward are the ports its port forwarder relays (the
	// PortForwardAnnotation), if it has one.
	Forward []uint16
	// Enclave is an SGX workload's enclave; it has no pod policy (Digest
	// and Policy are empty) and no VM (MemoryMiB is 0).
	Enclave *Enclave
}

// ServiceName is a workload's service name in the CAS manifest: its
// namespace, kind and name, which CAS's naming rules allow.
func ServiceName(namespace, kind, name string) (string, error) {
	s := namespace + "-" + strings.ToLower(kind) + "-" + name
	if len(s) > 63 {
		return "", fmt.Errorf("%s %s/%s: the manifest's service name %q is longer than 63 characters; use a shorter name", kind, namespace, name, s)
	}
	return s, nil
}

// WorkloadSecretID is the workload's secret id in the manifest: the one
// its annotation names, or its service name.
func (w Workload) WorkloadSecretID() string {
	if w.SecretID != "" {
		return w.SecretID
	}
	return w.Service
}

// workloadSecretID is the id a pod template's annotations name, empty
// without one.
func workloadSecretID(annotations map[string]string) (string, error) {
	key := WorkloadSecretIDAnnotation
	id, ok := annotations[key]
	if alias, has := annotations[ContrastWorkloadSecretIDAnnotation]; has {
		if ok && alias != id {
			return "", fmt.Errorf("annotations %s %q and %s %q name two workload secrets: keep one", key, id, ContrastWorkloadSecretIDAnnotation, alias)
		}
		key, id, ok = ContrastWorkloadSecretIDAnnotation, alias, true
	}
	if !ok {
		return "", nil
	}
	if err := policy.CheckWorkloadSecretID(id); err != nil {
		return "", fmt.Errorf("annotation %s: %w", key, err)
	}
	return id, nil
}
