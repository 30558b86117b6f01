package policy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"errors"
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/transit"
)

// ecdsaCurve is the owner keys' curve.
var ecdsaCurve = elliptic.P256()

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	secretRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	envRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	allowRE  = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?/([a-z0-9]([-a-z0-9]*[a-z0-9])?|\*)$`)
	dnsRE    = regexp.MustCompile(`^(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// A workload secret id is Contrast's: a Kubernetes-like name, '/'
	// allowed (NAMESPACE/NAME).
	workloadSecretIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
)

// MaxWorkloadSecretID bounds a workload secret id (a DNS name's length).
const MaxWorkloadSecretID = 253

// CheckWorkloadSecretID says what is wrong with a workload secret id.
func CheckWorkloadSecretID(id string) error {
	if !workloadSecretIDRE.MatchString(id) || len(id) > MaxWorkloadSecretID {
		return fmt.Errorf("%q: use letters, digits, '.', '_', '-' and '/', starting with a letter or digit, at most %d characters", id, MaxWorkloadSecretID)
	}
	return nil
}

// Limits that keep a policy (and what CAS does for it) bounded.
const (
	maxOwners      = 64
	maxServices    = 256
	maxSecrets     = 256
	maxPlainSecret = 64 << 10
	// A generated key pair costs CAS time at registration: an RSA-4096
	// key up to seconds.
	maxCertSecrets = 32
	maxRSASecrets  = 8
	maxValidity    = 365 * 24 * time.Hour
)

// countKinds counts the secrets that are key pairs with certificates,
// and the RSA ones among them.
func countKinds(secrets []Secret) (certs, rsaCerts int) {
	for _, s := range secrets {
		switch s.Kind {
		case RSACert:
			rsaCerts++
			certs++
		case ECDSACert:
			certs++
		}
	}
	return certs, rsaCerts
}

// Validate checks the document; the error lists every bad field.
func (d *Document) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.Version != Version {
		bad("version: %q, want %q", d.Version, Version)
	}
	if err := ValidName(d.Name); err != nil {
		bad("name: %w", err)
	}
	if _, err := d.OwnerKeys(); err != nil {
		errs = append(errs, err)
	}
	if t := d.Owners.Threshold; t < 0 || t > len(d.Owners.Keys) {
		if len(d.Owners.Keys) == 0 {
			bad("owners.threshold: %d, but no owner keys: a policy without owners can never be changed; add keys (cloister policy keygen) to allow updates", t)
		} else {
			bad("owners.threshold: %d, want 1..%d (the number of owner keys)", t, len(d.Owners.Keys))
		}
	}
	switch d.Read {
	case "", ReadOwners, ReadAny:
	default:
		bad("read: %q: use %s (only requests signed by an owner key read the document; the default) or %s (anyone may read it)", d.Read, ReadOwners, ReadAny)
	}
	// A policy without services holds its namespace: its owners approve
	// new names in it.
	if len(d.Services) > maxServices {
		bad("services: %d, at most %d", len(d.Services), maxServices)
	}
	if len(d.Secrets) > maxSecrets {
		bad("secrets: %d, at most %d", len(d.Secrets), maxSecrets)
	}
	secrets := map[string]*Secret{}
	for i := range d.Secrets {
		s := &d.Secrets[i]
		field := fmt.Sprintf("secrets[%d] (%s)", i, s.Name)
		if err := s.validate(); err != nil {
			bad("%s: %w", field, err)
		}
		if secrets[s.Name] != nil {
			bad("%s: name used twice", field)
		}
		secrets[s.Name] = s
	}
	if certs, rsaCerts := countKinds(d.Secrets); certs > maxCertSecrets || rsaCerts > maxRSASecrets {
		bad("secrets: %d certificates, %d of them RSA: at most %d, and %d RSA (CAS generates each key when the policy is registered)", certs, rsaCerts, maxCertSecrets, maxRSASecrets)
	}
	seen := map[string]bool{}
	for i := range d.Services {
		s := &d.Services[i]
		field := fmt.Sprintf("services[%d] (%s)", i, s.Name)
		if seen[s.Name] {
			bad("%s: name used twice", field)
		}
		seen[s.Name] = true
		for _, err := range s.validate(d.AllowSimulation, secrets) {
			bad("%s: %w", field, err)
		}
	}
	return errors.Join(errs...)
}

// OwnerKeys parses the owners' keys (ECDSA P-256, PEM), refusing repeats.
func (d *Document) OwnerKeys() ([]*ecdsa.PublicKey, error) {
	if len(d.Owners.Keys) > maxOwners {
		return nil, fmt.Errorf("owners.keys: %d keys, at most %d", len(d.Owners.Keys), maxOwners)
	}
	var keys []*ecdsa.PublicKey
	seen := map[string]bool{}
	for i, k := range d.Owners.Keys {
		key, err := ParsePublicKey([]byte(k))
		if err != nil {
			return nil, fmt.Errorf("owners.keys[%d]: %w", i, err)
		}
		fp := Fingerprint(key)
		if seen[fp] {
			return nil, fmt.Errorf("owners.keys[%d]: the same key as an earlier one (%s)", i, fp)
		}
		seen[fp] = true
		keys = append(keys, key)
	}
	return keys, nil
}

// Immutable says the policy has no owners: it is registered unsigned,
// once, and nobody can change it.
func (d *Document) Immutable() bool { return len(d.Owners.Keys) == 0 }

// OwnerThreshold is how many owner signatures an update needs.
func (d *Document) OwnerThreshold() int { return max(1, d.Owners.Threshold) }

// ParsePublicKey reads an ECDSA P-256 public key (PEM "PUBLIC KEY").
func ParsePublicKey(data []byte) (*ecdsa.PublicKey, error) { return keyfile.ParsePublic(data) }

func (s *Service) validate(allowSimulation bool, secrets map[string]*Secret) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !nameRE.MatchString(s.Name) || len(s.Name) > 63 {
		bad("name: use lowercase letters, digits and '-', at most 63 characters")
	}
	a := attest.Policy{Identities: s.Attestation.Identities, AcceptTCB: s.Attestation.AcceptTCB}
	if err := a.Validate(); err != nil {
		bad("attestation: %w", err)
	}
	// A service is one pod's policy, not its runtime class's.
	for i := range s.Attestation.Identities {
		if err := s.Attestation.Identities[i].CheckPinsPod(); err != nil {
			bad("attestation.identities[%d]: %w", i, err)
		}
	}
	if err := validateTolerate(s.Attestation.Tolerate); err != nil {
		errs = append(errs, err)
	}
	if len(s.Attestation.Identities) == 0 && !allowSimulation {
		bad("attestation.identities: none, so any workload could attest as this service: list the measurements it may have")
	}
	if len(s.Certificate.SANs) == 0 {
		bad("certificate.sans: none: give the DNS names or IP addresses the service is reached by")
	}
	for i, san := range s.Certificate.SANs {
		if net.ParseIP(san) == nil && (!dnsRE.MatchString(san) || len(san) > 253) {
			bad("certificate.sans[%d]: %q is neither a DNS name nor an IP address", i, san)
		}
		if san == ReservedDomain || strings.HasSuffix(san, "."+ReservedDomain) {
			bad("certificate.sans[%d]: %q: names under .%s are CAS's own (the name its workloads reach it by, which a workload's certificate could otherwise answer for)", i, san, ReservedDomain)
		}
	}
	if v := s.Certificate.Validity; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > maxValidity {
			bad("certificate.validity: %q: use a duration from 1m to 8760h, e.g. 24h", v)
		}
	}
	mesh := s.Mesh
	if mesh == nil {
		mesh = &Mesh{}
	}
	for field, list := range map[string][]string{"allow": mesh.Allow, "upstreams": mesh.Upstreams} {
		for i, a := range list {
			if !allowRE.MatchString(a) {
				bad("mesh.%s[%d]: %q: name a workload as POLICY/SERVICE or POLICY/*, where POLICY may be NAMESPACE/NAME (lowercase letters, digits and '-')", field, i, a)
			}
		}
	}
	for i, name := range s.Secrets {
		if secrets[name] == nil {
			bad("secrets[%d]: %q is not among the policy's secrets", i, name)
		}
	}
	for k := range s.Env {
		if !envRE.MatchString(k) {
			bad("env: %q is not a variable name (letters, digits, '_')", k)
		}
	}
	for p := range s.Files {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			bad("files: %q: use a clean absolute path", p)
		}
	}
	if id := s.WorkloadSecretID; id != "" {
		if err := CheckWorkloadSecretID(id); err != nil {
			bad("workloadSecretID: %w", err)
		}
	}
	errs = append(errs, s.Transit.validate()...)
	errs = append(errs, s.checkTemplates(secrets)...)
	return errs
}

func (s *Secret) validate() error {
	if !secretRE.MatchString(s.Name) || len(s.Name) > 63 {
		return errors.New("name: start with a letter, then letters, digits or '_' (templates read it as .Secrets.NAME), at most 63")
	}
	if s.Kind != Plain && s.Value != nil {
		return fmt.Errorf("value: only a plain secret has one; CAS generates a %s", s.Kind)
	}
	sizes := map[string][]int{SymmetricKey: {16, 24, 32, 64}, RSACert: {2048, 3072, 4096}, ECDSACert: {256, 384}, Plain: {0}}
	allowed, ok := sizes[s.Kind]
	switch {
	case !ok:
		return fmt.Errorf("kind: %q: use %s, %s, %s or %s", s.Kind, SymmetricKey, ECDSACert, RSACert, Plain)
	case s.Kind == Plain && len(s.Value) == 0:
		return errors.New("value: a plain secret needs its value (base64)")
	case s.Kind == Plain && len(s.Value) > maxPlainSecret:
		return fmt.Errorf("value: %d bytes, at most %d", len(s.Value), maxPlainSecret)
	case s.Kind == Plain && s.Size != 0:
		return errors.New("size: a plain secret's size is its value's")
	case s.Size != 0 && !slices.Contains(allowed, s.Size):
		return fmt.Errorf("size: %d, use one of %v for %s", s.Size, allowed, s.Kind)
	}
	return nil
}

// KeySize is the secret's size with its default applied.
func (s *Secret) KeySize() int {
	if s.Size != 0 {
		return s.Size
	}
	return map[string]int{SymmetricKey: 32, RSACert: 3072, ECDSACert: 256}[s.Kind]
}

// ReservedDomain is the domain of CAS's own names (its trust domain,
// cas-HEX.cloister, the name it serves its workloads' TLS under): no
// workload certificate carries one.
const ReservedDomain = "cloister"

// maxTransitKeys bounds a service's transit keys: a Vault seal uses one.
const maxTransitKeys = 16

func (t *Transit) validate() []error {
	if t == nil {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(t.Keys) == 0 || len(t.Keys) > maxTransitKeys {
		bad("transit.keys: %d keys: give 1 to %d, or no transit", len(t.Keys), maxTransitKeys)
	}
	seen := map[string]bool{}
	for i, k := range t.Keys {
		if !nameRE.MatchString(k.Name) || len(k.Name) > 63 {
			bad("transit.keys[%d].name: %q: use lowercase letters, digits and '-', at most 63 characters", i, k.Name)
		}
		if seen[k.Name] {
			bad("transit.keys[%d].name: %q twice", i, k.Name)
		}
		seen[k.Name] = true
		if k.Version < 1 || k.Version > transit.MaxVersion {
			bad("transit.keys[%d].version: %d: from 1 to %d (raise it to rotate the key)", i, k.Version, transit.MaxVersion)
		}
		if k.MinDecryptionVersion < 0 || k.MinDecryptionVersion > k.Version {
			bad("transit.keys[%d].minDecryptionVersion: %d: from 1 to the key's version %d (0 is 1)", i, k.MinDecryptionVersion, k.Version)
		}
	}
	return errs
}
