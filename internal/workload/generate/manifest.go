package generate

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// Manifest says what the CAS manifest holds besides the workloads.
type Manifest struct {
	// Name of the policy in CAS.
	Name     string
	Platform runtimeclass.Platform
	// Reference values; sim needs none.
	Reference *refvalues.File
	// OwnerKeys (PEM public keys) may update the manifest; none makes it
	// immutable.
	OwnerKeys []string
}

// OwnerThreshold is how many of OwnerKeys sign a change of the manifest,
// which the initializers pin beside the keys.
func (m Manifest) OwnerThreshold() int {
	d := policy.Document{Owners: policy.Owners{Keys: m.OwnerKeys}}
	return d.OwnerThreshold()
}

// Document is the CAS policy whose services are the workloads, each
// identified by its pod policy digest under the platform's reference
// values, with its DNS names from the Services that select it and its
// workload secret by id.
func (m Manifest) Document(workloads []Workload, services []Service) (*policy.Document, error) {
	doc := &policy.Document{
		Version: policy.Version,
		Name:    m.Name,
		Owners:  policy.Owners{Keys: m.OwnerKeys},
		// Data owners who are not workload owners verify the manifest
		// with cloister verify: it holds measurements and names, and
		// CAS never serves secret values.
		Read:            policy.ReadAny,
		AllowSimulation: m.Platform == runtimeclass.Sim,
	}
	for _, w := range workloads {
		id, err := m.identity(w.Digest)
		if err != nil {
			return nil, err
		}
		doc.Services = append(doc.Services, policy.Service{
			Name:             w.Service,
			Attestation:      policy.Attestation{Identities: []attest.Identity{id}},
			Certificate:      policy.Certificate{SANs: sans(w, services)},
			Files:            map[string]string{WorkloadSecretFile: WorkloadSecretTemplate},
			WorkloadSecretID: w.WorkloadSecretID(),
		})
	}
	if err := doc.Validate(); err != nil {
		return nil, fmt.Errorf("the manifest: %w", err)
	}
	return doc, nil
}

// WorkloadSecretFile is the manifest's file of the workload's secret
// (hex); the initializer writes it under files/ of its output folder.
const WorkloadSecretFile = "/workload-secret"

// WorkloadSecretTemplate is what the file holds: the secret CAS derives
// for the service's workloadSecretID.
const WorkloadSecretTemplate = "{{ .WorkloadSecret.Hex }}" //nolint:gosec // G101: a template that names the secret, not one

func (m Manifest) identity(digest string) (attest.Identity, error) {
	if m.Platform == runtimeclass.SGX {
		if m.Reference == nil || m.Reference.SGX == nil {
			return attest.Identity{}, errors.New("reference values for sgx: give the enclave's identity in a reference-values file (cloister reference-values compute --platform sgx --sigstruct)")
		}
		return m.Reference.SGX.Identity(), nil
	}
	d, err := hex.DecodeString(digest)
	if err != nil || len(d) != 32 {
		return attest.Identity{}, fmt.Errorf("policy digest %q is not a SHA-256", digest)
	}
	switch m.Platform {
	case runtimeclass.Sim:
		return attest.Identity{Type: attest.Sim, HostData: d}, nil
	case runtimeclass.SNP:
		if m.Reference == nil || m.Reference.SNP == nil {
			return attest.Identity{}, fmt.Errorf("reference values for snp: give the guest's launch measurement (snp.measurement) in a reference-values file")
		}
		snp := m.Reference.SNP
		return attest.Identity{Type: attest.SNP, Measurement: snp.Measurement, MinTCB: snp.MinTCB, GuestPolicy: snp.GuestPolicy, HostData: d}, nil
	case runtimeclass.TDX:
		if m.Reference == nil || m.Reference.TDX == nil {
			return attest.Identity{}, fmt.Errorf("reference values for tdx: give the TD's MRTD (tdx.mrtd) in a reference-values file")
		}
		if r := m.Reference.TDX.RTMR; len(r) < attest.PodRTMRs || slices.ContainsFunc(r[:attest.PodRTMRs], func(b attest.Bytes) bool { return len(b) == 0 }) {
			return attest.Identity{}, fmt.Errorf("reference values for tdx: give RTMR0 to RTMR2 (tdx.rtmr: firmware configuration, kernel and initrd, command line; cloister reference-values compute --rtmr): MRTD measures the firmware alone, which every TD of the runtime class shares")
		}
		// MRCONFIGID is 48 bytes: the SHA-256, zero-padded, as Kata sets it.
		return attest.Identity{Type: attest.TDX, MRTD: m.Reference.TDX.MRTD, RTMR: m.Reference.TDX.RTMR,
			MRCONFIGID: append(d, make([]byte, 16)...)}, nil
	}
	return attest.Identity{}, fmt.Errorf("unknown platform %q", m.Platform)
}

// sans are the DNS names of the Services selecting the workload's pods,
// or the workload's own name in its namespace when none does.
func sans(w Workload, services []Service) []string {
	var out []string
	for _, s := range services {
		if s.Namespace != w.Namespace || len(s.Selector) == 0 || !selects(s.Selector, w.Labels) {
			continue
		}
		out = append(out, s.Name, s.Name+"."+s.Namespace, s.Name+"."+s.Namespace+".svc", s.Name+"."+s.Namespace+".svc.cluster.local")
		out = append(out, s.Addresses...)
	}
	if len(out) == 0 {
		out = []string{w.Name + "." + w.Namespace}
	}
	return out
}

func selects(selector, labels map[string]string) bool {
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		if labels[k] != selector[k] {
			return false
		}
	}
	return true
}

// CheckManifest says where the workloads of the YAML and the manifest
// part: a workload the manifest does not name, or names with another
// policy digest or workload secret id (the YAML changed after generate),
// or a service of the manifest no workload of the YAML is.
func CheckManifest(doc *policy.Document, workloads []Workload) error {
	var problems []string
	seen := map[string]bool{}
	for _, w := range workloads {
		seen[w.Service] = true
		if doc.Service(w.Service) == nil {
			problems = append(problems, fmt.Sprintf("%s %s/%s is not in the manifest", w.Kind, w.Namespace, w.Name))
			continue
		}
		if !InManifest(doc, w) {
			problems = append(problems, fmt.Sprintf("%s %s/%s: its policy %s is not the manifest's", w.Kind, w.Namespace, w.Name, w.Digest[:16]))
		}
		if id := doc.Service(w.Service).WorkloadSecretID; id != w.WorkloadSecretID() {
			problems = append(problems, fmt.Sprintf("%s %s/%s: its workload secret id %q is not the manifest's %q", w.Kind, w.Namespace, w.Name, w.WorkloadSecretID(), id))
		}
	}
	for _, s := range doc.Services {
		if !seen[s.Name] {
			problems = append(problems, fmt.Sprintf("the manifest's service %s is no workload of the YAML", s.Name))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the YAML and %s differ (run cloister generate on the YAML again): %s", ManifestFile, strings.Join(problems, "; "))
	}
	return nil
}

// InManifest says whether the manifest names the workload with its
// policy digest, or an SGX workload by an enclave.
func InManifest(doc *policy.Document, w Workload) bool {
	names := func(id attest.Identity) bool { return namesDigest(id, w.Digest) }
	if w.Enclave != nil {
		names = func(id attest.Identity) bool { return id.Type == attest.SGX }
	}
	svc := doc.Service(w.Service)
	return svc != nil && slices.ContainsFunc(svc.Attestation.Identities, names)
}

// namesDigest says whether an identity is the pod policy digest.
func namesDigest(id attest.Identity, digest string) bool {
	switch id.Type {
	case attest.Sim, attest.SNP:
		return id.HostData.String() == digest
	case attest.TDX:
		return strings.HasPrefix(id.MRCONFIGID.String(), digest)
	}
	return false
}
