// Package refvalues owns reference values: what the hardware measures
// when a confidential VM or an enclave is launched, which a CAS manifest's
// identities pin. It reads and writes their file (versioned, strict) and
// computes them from the workload's artifacts: an SGX enclave's identity
// from its SIGSTRUCT (sgx.go); the SEV-SNP launch measurement from the
// firmware (OVMF), the kernel, initrd and command line it measures by
// hash, and the vCPUs (snp.go, ovmf.go); a TD's MRTD from its firmware
// (TDVF, tdx.go).
package refvalues

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Version is the file format's.
const Version = "cloister.dev/reference-values/v1"

// MaxFile bounds a reference values file: a few hundred bytes of hex.
const MaxFile = 64 << 10

// File is a reference values file.
type File struct {
	Version string `json:"version,omitempty"`
	SNP     *SNP   `json:"snp,omitempty"`
	TDX     *TDX   `json:"tdx,omitempty"`
	SGX     *SGX   `json:"sgx,omitempty"`
	// Source says what the values were computed from, for the reader:
	// the artifacts' SHA-256 and the command line.
	Source *Source `json:"source,omitempty"`
}

// SNP are an SEV-SNP guest's: its launch measurement, the guest policy
// it must run under, and the lowest TCB accepted.
type SNP struct {
	Measurement attest.Bytes   `json:"measurement"`
	GuestPolicy *uint64        `json:"guestPolicy,omitempty"`
	MinTCB      *attest.SNPTCB `json:"minTCB,omitempty"`
	VCPUs       int            `json:"vcpus,omitempty"`
	VCPUType    string         `json:"vcpuType,omitempty"`
}

// TDX are a TD's: its MRTD, and RTMRs by index (an empty one matches
// anything).
type TDX struct {
	MRTD attest.Bytes   `json:"mrtd"`
	RTMR []attest.Bytes `json:"rtmr,omitempty"`
}

// Source names the artifacts the values derive from.
type Source struct {
	Firmware string `json:"firmware,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	Initrd   string `json:"initrd,omitempty"`
	Cmdline  string `json:"cmdline,omitempty"`
	// Sigstruct is the enclave's SIGSTRUCT; Image the image it was read
	// from, by digest, and Path where in it.
	Sigstruct string `json:"sigstruct,omitempty"`
	Image     string `json:"image,omitempty"`
	Path      string `json:"path,omitempty"`
}

// Digest names an artifact in Source: sha256:HEX.
func Digest(data []byte) string {
	h := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(h[:])
}

// Parse reads a reference values file (YAML or JSON), refusing unknown
// fields and values that cannot pin a guest.
func Parse(data []byte) (*File, error) {
	if len(data) > MaxFile {
		return nil, fmt.Errorf("reference values: %d bytes, more than %d", len(data), MaxFile)
	}
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("reference values: %w", err)
	}
	return &f, f.Validate()
}

// Platforms names the platforms the file holds values of.
func (f *File) Platforms() []string {
	var out []string
	for name, set := range map[string]bool{"snp": f.SNP != nil, "tdx": f.TDX != nil, "sgx": f.SGX != nil} {
		if set {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Validate checks what a manifest needs of the values.
func (f *File) Validate() error {
	if f.Version != "" && f.Version != Version {
		return fmt.Errorf("version: %q, want %q (or none)", f.Version, Version)
	}
	if f.SNP == nil && f.TDX == nil && f.SGX == nil {
		return fmt.Errorf("no snp, tdx or sgx values: give the platform's")
	}
	if f.SGX != nil {
		if err := f.SGX.validate(); err != nil {
			return err
		}
	}
	// The launch measurement is what pins the guest: without it the
	// manifest would admit any guest of the platform.
	if f.SNP != nil && len(f.SNP.Measurement) != 48 {
		return fmt.Errorf("snp.measurement: %d bytes: give the guest's launch measurement, 48 bytes (96 hex digits)", len(f.SNP.Measurement))
	}
	if f.TDX != nil {
		if len(f.TDX.MRTD) != 48 {
			return fmt.Errorf("tdx.mrtd: %d bytes: give the TD's launch measurement, 48 bytes (96 hex digits)", len(f.TDX.MRTD))
		}
		if len(f.TDX.RTMR) > 4 {
			return fmt.Errorf("tdx.rtmr: %d entries, a TD has 4", len(f.TDX.RTMR))
		}
		for i, r := range f.TDX.RTMR {
			if len(r) != 0 && len(r) != 48 {
				return fmt.Errorf("tdx.rtmr[%d]: %d bytes, want 48 or none", i, len(r))
			}
		}
	}
	return nil
}

// Marshal writes the file as YAML, with its version.
func (f *File) Marshal() ([]byte, error) {
	out := *f
	out.Version = Version
	b, err := yaml.Marshal(out)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(append([]byte("# Reference values: what the hardware measures at the guest's launch.\n"), b...)), nil
}
