// Package policy owns the CAS policy document: its versioned schema, strict
// parsing, validation (every error names the field and the fix) and the
// canonical bytes owners sign and CAS hashes.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Version is the schema version this CAS reads.
const Version = "cloister.dev/policy/v1"

// Document is a policy: who owns it, which services may attest and what
// each gets, and the secrets CAS generates or holds for them.
type Document struct {
	Version string `json:"version"`
	// Name identifies the policy in CAS; updates keep it.
	Name   string `json:"name"`
	Owners Owners `json:"owners"`
	// Read says who may read the document back from CAS: "owners" (the
	// default: a request signed by an owner key) or "any". Everyone may
	// read a version's public record: name, version, digest,
	// predecessor, signers.
	Read string `json:"read,omitempty"`
	// AllowSimulation lets services attest with simulated (insecure)
	// evidence; for development only.
	AllowSimulation bool      `json:"allowSimulation,omitempty"`
	Services        []Service `json:"services"`
	Secrets         []Secret  `json:"secrets,omitempty"`
}

// Owners may update the policy: Threshold of Keys must sign a change.
// Without keys the policy is immutable: registered once, with the board's
// signature alone, and never changed.
type Owners struct {
	// Keys are ECDSA P-256 public keys, PEM ("cloister policy keygen").
	Keys []string `json:"keys"`
	// Threshold of owner signatures an update needs; default 1.
	Threshold int `json:"threshold,omitempty"`
}

// Service is a workload that attests to CAS.
type Service struct {
	Name string `json:"name"`
	// Attestation is what its evidence must show: identities (any-of),
	// accepted TCB statuses, whether debug is allowed.
	Attestation Attestation `json:"attestation"`
	Certificate Certificate `json:"certificate"`
	// Env and Files may reference the service's secrets by template,
	// e.g. "{{ .Secrets.db.Hex }}".
	Env   map[string]string `json:"env,omitempty"`
	Files map[string]string `json:"files,omitempty"`
	// Secrets the service may read, by name.
	Secrets []string `json:"secrets,omitempty"`
	// WorkloadSecretID names the service's workload secret: CAS derives
	// it from its seed, the policy's name and this id, and stores
	// nothing. Every replica, and every later version of the policy that
	// keeps the id, receives the same secret; services of the policy that
	// name the same id share it; another policy never gets it, whatever
	// id it names. Changing the id rotates the secret. Templates read it
	// as .WorkloadSecret.Hex (Raw, Base64). Empty: no workload secret.
	WorkloadSecretID string `json:"workloadSecretID,omitempty"`
	// Mesh is what the service's mesh admits. A pointer, so that a
	// policy without it keeps the canonical form (and digest) it had.
	Mesh *Mesh `json:"mesh,omitempty"`
	// Transit are the keys CAS keeps for the service's Vault seal
	// (`seal "transit"`): it encrypts and decrypts under them only for a
	// client holding the service's attested certificate. A pointer, as
	// Mesh.
	Transit *Transit `json:"transit,omitempty"`
}

// Transit is a service's transit keys.
type Transit struct {
	Keys []TransitKey `json:"keys"`
}

// TransitKey is one transit key. Its versions are derived from CAS's seed
// (nothing stores them); rotating it is a new policy version with Version
// raised, and MinDecryptionVersion retires the versions below it.
type TransitKey struct {
	Name string `json:"name"`
	// Version is the version new ciphertexts are made under.
	Version int `json:"version"`
	// MinDecryptionVersion is the oldest version CAS still decrypts
	// under; 0 is 1.
	MinDecryptionVersion int `json:"minDecryptionVersion,omitempty"`
}

// TransitKey is the service's key name, nil without one.
func (s *Service) TransitKey(name string) *TransitKey {
	if s.Transit == nil {
		return nil
	}
	for i := range s.Transit.Keys {
		if s.Transit.Keys[i].Name == name {
			return &s.Transit.Keys[i]
		}
	}
	return nil
}

// Mesh is a service's mesh authorization, by mesh identities of this CAS:
// POLICY/SERVICE, or POLICY/* for every service of a policy. Each
// defaults to every service of its own policy.
type Mesh struct {
	// Allow are the callers its ingress admits.
	Allow []string `json:"allow,omitempty"`
	// Upstreams are the workloads its egress connects to.
	Upstreams []string `json:"upstreams,omitempty"`
}

// MeshAuthz is the service's Mesh with the defaults applied.
func (s *Service) MeshAuthz(policy string) (allow, upstreams []string) {
	if s.Mesh != nil {
		allow, upstreams = s.Mesh.Allow, s.Mesh.Upstreams
	}
	if len(allow) == 0 {
		allow = []string{policy + "/*"}
	}
	if len(upstreams) == 0 {
		upstreams = []string{policy + "/*"}
	}
	return allow, upstreams
}

// Attestation is the part of attest.Policy a policy author sets; CAS adds
// the report-data binding to the CSR's key and the policy's simulation
// setting.
type Attestation struct {
	Identities []attest.Identity `json:"identities"`
	AcceptTCB  []string          `json:"acceptTCB,omitempty"`
	AllowDebug bool              `json:"allowDebug,omitempty"`
	// Tolerate names accepted exceptions (debug-mode, outdated-tcb,
	// software-hardening-needed, configuration-needed), as SCONE's
	// policies do; they add to acceptTCB and allowDebug.
	Tolerate []string `json:"tolerate,omitempty"`
}

// Certificate is what the service's certificate says.
type Certificate struct {
	// SANs: DNS names and IP addresses.
	SANs []string `json:"sans"`
	// Validity, a Go duration; default 24h, at most 8760h.
	Validity string `json:"validity,omitempty"`
}

// Read access.
const (
	ReadOwners = "owners"
	ReadAny    = "any"
)

// ReadableByAnyone says the document may be served without an owner's
// signed request.
func (d *Document) ReadableByAnyone() bool { return d.Read == ReadAny }

// ReadAccess is Read with its default applied.
func (d *Document) ReadAccess() string {
	if d.Read == "" {
		return ReadOwners
	}
	return d.Read
}

// Redacted is the document without the values of its plain secrets: what
// CAS serves and keeps in its history, so no read ever returns a secret
// value. It says whether anything was removed.
func (d *Document) Redacted() (*Document, bool) {
	out := *d
	out.Secrets = append([]Secret(nil), d.Secrets...)
	removed := false
	for i := range out.Secrets {
		if out.Secrets[i].Value != nil {
			out.Secrets[i].Value, removed = nil, true
		}
	}
	return &out, removed
}

// ParseOwners reads only what a stored (possibly redacted) version says
// of its owners; it is for documents CAS itself wrote to its history,
// which passed Parse when they were registered.
func ParseOwners(data []byte) (*Document, error) {
	var d Document
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return nil, err
	}
	if _, err := d.OwnerKeys(); err != nil {
		return nil, err
	}
	return &Document{Version: d.Version, Name: d.Name, Owners: d.Owners, Read: d.Read}, nil
}

// Secret kinds.
const (
	SymmetricKey = "symmetric-key"
	ECDSACert    = "ecdsa-cert"
	RSACert      = "rsa-cert"
	Plain        = "plain"
)

// Secret is generated by CAS (symmetric-key, ecdsa-cert, rsa-cert) or
// given by an owner (plain).
type Secret struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Size: bytes of a symmetric key (16, 24, 32, 64; default 32), bits
	// of an RSA key (2048, 3072, 4096; default 3072), the curve of an
	// ECDSA key (256 or 384; default 256).
	Size int `json:"size,omitempty"`
	// Value of a plain secret, base64.
	Value []byte `json:"value,omitempty"`
}

// Parse reads a policy (YAML or JSON), refusing unknown fields, and
// validates it.
func Parse(data []byte) (*Document, error) {
	var d Document
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Canonical is the document's signed form: the JSON of the parsed,
// validated document (map keys sorted, fields in schema order), so YAML
// layout, comments and key order do not change it.
func (d *Document) Canonical() []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic("policy: marshalling a validated document: " + err.Error())
	}
	return b
}

// Digest is the SHA-256 of the canonical bytes, hex.
func (d *Document) Digest() string {
	h := sha256.Sum256(d.Canonical())
	return hex.EncodeToString(h[:])
}

// CertificateValidity is the service's certificate lifetime.
func (s *Service) CertificateValidity() time.Duration {
	if s.Certificate.Validity == "" {
		return 24 * time.Hour
	}
	v, _ := time.ParseDuration(s.Certificate.Validity) // validated
	return v
}

// Policy is the attest policy its evidence is judged by, before CAS adds
// the report-data binding.
func (d *Document) Policy(s *Service) attest.Policy {
	return attest.Policy{
		Identities:      s.Attestation.Identities,
		AcceptTCB:       s.Attestation.acceptedStatuses(),
		AllowDebug:      s.Attestation.AllowDebug || slices.Contains(s.Attestation.Tolerate, TolerateDebugMode),
		AllowSimulation: d.AllowSimulation,
	}
}

// Service returns the named service, or nil.
func (d *Document) Service(name string) *Service {
	for i := range d.Services {
		if d.Services[i].Name == name {
			return &d.Services[i]
		}
	}
	return nil
}

// Secret returns the named secret, or nil.
func (d *Document) Secret(name string) *Secret {
	for i := range d.Secrets {
		if d.Secrets[i].Name == name {
			return &d.Secrets[i]
		}
	}
	return nil
}
