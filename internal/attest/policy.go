package attest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Policy is what a relying party accepts. The zero Policy accepts any
// identity with TCB status UpToDate, no debug, no simulation.
type Policy struct {
	// Identities: the claims must match one of them (any-of); empty
	// accepts any identity.
	Identities []Identity `json:"identities,omitempty"`
	// AcceptTCB lists accepted TCB statuses; empty means UpToDate only.
	AcceptTCB  []string `json:"acceptTCB,omitempty"`
	AllowDebug bool     `json:"allowDebug,omitempty"`
	// ReportData, when set, must be the start of the claims' report data
	// (e.g. the SHA-256 of the public key the workload's CSR carries).
	ReportData Bytes `json:"reportData,omitempty"`
	// Nonce, when set, must be the claims' nonce: the evidence was made
	// for this verifier's challenge (Nitro and simulated evidence carry
	// one beside the report data).
	Nonce Bytes `json:"nonce,omitempty"`
	// AllowSimulation accepts evidence no hardware vouches for.
	AllowSimulation bool `json:"allowSimulation,omitempty"`
}

// Identity is one expected workload. Type selects which fields apply;
// unset fields match anything.
type Identity struct {
	Type Type `json:"type"`
	// SGX
	MRENCLAVE Bytes   `json:"mrenclave,omitempty"`
	MRSIGNER  Bytes   `json:"mrsigner,omitempty"`
	ISVProdID *uint16 `json:"isvProdID,omitempty"`
	MinISVSVN uint16  `json:"minISVSVN,omitempty"`
	// Attributes and AttributesMask pin the enclave's ATTRIBUTES (16
	// bytes: flags, then XFRM) where the mask is set, as a SIGSTRUCT's
	// ATTRIBUTES and ATTRIBUTEMASK do at EINIT.
	Attributes     Bytes `json:"attributes,omitempty"`
	AttributesMask Bytes `json:"attributesMask,omitempty"`
	// TDX
	MRTD Bytes   `json:"mrtd,omitempty"`
	RTMR []Bytes `json:"rtmr,omitempty"` // by index; an empty entry matches anything
	// MRCONFIGID: what the host configured the TD with, e.g. a pod
	// policy's digest (zero-padded to 48 bytes).
	MRCONFIGID Bytes `json:"mrConfigID,omitempty"`
	// MRServiceTD pins the service TDs bound to the TD (TD 1.5 reports;
	// a TD 1.0 report has none, and matches only an MRServiceTD of
	// zeros).
	MRServiceTD Bytes `json:"mrServiceTD,omitempty"`
	// SNP
	Measurement Bytes `json:"measurement,omitempty"`
	// HostData: SNP host data, or in simulation what LAS vouches for
	// (the calling pod's policy digest).
	HostData Bytes `json:"hostData,omitempty"`
	// MinTCB is the lowest SEV-SNP TCB accepted, by component.
	MinTCB *SNPTCB `json:"minTCB,omitempty"`
	// GuestPolicy is the SEV-SNP guest policy the guest must run under
	// (its report's POLICY: debug, SMT, migration, ABI).
	GuestPolicy *uint64 `json:"guestPolicy,omitempty"`
	// RequirePolicyFlags and ForbidPolicyFlags name guest policy flags
	// (SNPPolicyFlags) that must be set and clear, where GuestPolicy pins
	// them all: e.g. require pageSwapDisable and ciphertextHidingDRAM,
	// forbid migrateMA.
	RequirePolicyFlags []string `json:"requirePolicyFlags,omitempty"`
	ForbidPolicyFlags  []string `json:"forbidPolicyFlags,omitempty"`
	// Nitro
	PCRs map[int]Bytes `json:"pcrs,omitempty"`
	// Manifest is the SHA-256 of the enclave manifest a Cloister enclave
	// applied (the commands, arguments and environment PCR0 to PCR2 do
	// not measure) as the only one since it booted: its orchestrator
	// extends PCR16 with it, and each later manifest into the next PCR.
	// The user data stays free for the report data (a CSR's key).
	Manifest Bytes `json:"manifest,omitempty"`
}

// Check judges claims; a rejection names the first check that fails.
func (p *Policy) Check(c *Claims) error {
	if c.Insecure && !p.AllowSimulation {
		return Reject(CheckSimulation, "the evidence is simulated (no TEE vouches for it) and the policy does not allow simulation")
	}
	if c.Debug && !p.AllowDebug {
		return Reject(CheckDebug, "the %s evidence is from a debug-mode workload, whose memory the host can read; the policy does not allow debug", c.Type)
	}
	accepted := p.AcceptTCB
	if len(accepted) == 0 {
		accepted = []string{TCBUpToDate}
	}
	if !slices.Contains(accepted, c.TCBStatus) {
		return Reject(CheckTCB, "TCB status %q is not accepted (accepted: %s)", c.TCBStatus, strings.Join(accepted, ", "))
	}
	if len(p.Identities) > 0 {
		var why []string
		for i := range p.Identities {
			mismatch := p.Identities[i].mismatch(c)
			if mismatch == "" {
				why = nil
				break
			}
			why = append(why, fmt.Sprintf("identities[%d]: %s", i, mismatch))
		}
		if why != nil {
			return Reject(CheckIdentity, "no expected identity matches: %s", strings.Join(why, "; "))
		}
	}
	if len(p.ReportData) > 0 && !bytes.HasPrefix(c.ReportData, p.ReportData) {
		return Reject(CheckReportData, "report data %s does not start with the expected %s", c.ReportData, p.ReportData)
	}
	if len(p.Nonce) > 0 && !bytes.Equal(c.Nonce, p.Nonce) {
		return Reject(CheckNonce, "the evidence's nonce is %s, want %s: it was made for another challenge, or replayed", c.Nonce, p.Nonce)
	}
	return nil
}

// mismatch says why id does not match c, or "".
func (id *Identity) mismatch(c *Claims) string {
	eq := func(field string, want, got Bytes) string {
		if len(want) > 0 && len(got) == 0 {
			return fmt.Sprintf("%s is missing, want %s", field, want)
		}
		if len(want) > 0 && !bytes.Equal(want, got) {
			return fmt.Sprintf("%s is %s, want %s", field, got, want)
		}
		return ""
	}
	first := func(s ...string) string {
		for _, x := range s {
			if x != "" {
				return x
			}
		}
		return ""
	}
	switch id.Type {
	case SGX:
		s := c.SGX
		if s == nil {
			return fmt.Sprintf("want sgx evidence, got %s", c.Type)
		}
		if id.ISVProdID != nil && *id.ISVProdID != s.ISVProdID {
			return fmt.Sprintf("ISVPRODID is %d, want %d", s.ISVProdID, *id.ISVProdID)
		}
		if s.ISVSVN < id.MinISVSVN {
			return fmt.Sprintf("ISVSVN %d is below the minimum %d", s.ISVSVN, id.MinISVSVN)
		}
		if id.AttributesMask != nil && !maskedEqual(s.Attributes, id.Attributes, id.AttributesMask) {
			return fmt.Sprintf("ATTRIBUTES are %x, want %x under the mask %x", []byte(s.Attributes), []byte(id.Attributes), []byte(id.AttributesMask))
		}
		return first(eq("MRENCLAVE", id.MRENCLAVE, s.MRENCLAVE), eq("MRSIGNER", id.MRSIGNER, s.MRSIGNER))
	case TDX:
		t := c.TDX
		if t == nil {
			return fmt.Sprintf("want tdx evidence, got %s", c.Type)
		}
		if len(id.RTMR) > len(t.RTMR) {
			return fmt.Sprintf("%d RTMRs expected, TDX has %d", len(id.RTMR), len(t.RTMR))
		}
		for i, want := range id.RTMR {
			if m := eq(fmt.Sprintf("RTMR%d", i), want, t.RTMR[i]); m != "" {
				return m
			}
		}
		serviceTD := t.MRServiceTD
		if serviceTD == nil {
			serviceTD = make(Bytes, 48)
		}
		return first(eq("MRTD", id.MRTD, t.MRTD), eq("MRCONFIGID", id.MRCONFIGID, t.MRCONFIGID), eq("MRSERVICETD", id.MRServiceTD, serviceTD))
	case SNP:
		s := c.SNP
		if s == nil {
			return fmt.Sprintf("want snp evidence, got %s", c.Type)
		}
		if id.MinTCB != nil {
			if m := s.TCB.below(*id.MinTCB); m != "" {
				return "reported TCB: " + m
			}
		}
		if id.GuestPolicy != nil && s.GuestPolicy != *id.GuestPolicy {
			return fmt.Sprintf("guest policy is %#x, want %#x", s.GuestPolicy, *id.GuestPolicy)
		}
		if m := policyFlagsMismatch(s.GuestPolicy, id.RequirePolicyFlags, id.ForbidPolicyFlags); m != "" {
			return m
		}
		return first(eq("measurement", id.Measurement, s.Measurement), eq("host data", id.HostData, s.HostData))
	case Sim:
		s := c.Sim
		if c.Type != Sim {
			return fmt.Sprintf("want sim evidence, got %s", c.Type)
		}
		if s == nil {
			s = &SimIdentity{}
		}
		return eq("host data", id.HostData, s.HostData)
	case Nitro:
		n := c.Nitro
		if n == nil {
			return fmt.Sprintf("want nitro evidence, got %s", c.Type)
		}
		for _, i := range slices.Sorted(maps.Keys(id.PCRs)) {
			if m := eq(fmt.Sprintf("PCR%d", i), id.PCRs[i], n.PCRs[i]); m != "" {
				return m
			}
		}
		if len(id.Manifest) > 0 {
			return manifestMismatch(n.PCRs, id.Manifest)
		}
		return ""
	}
	return fmt.Sprintf("unknown identity type %q", id.Type)
}

// policyFlagsMismatch names the first flag of require that is clear, or
// of forbid that is set, in a guest policy.
func policyFlagsMismatch(policy uint64, require, forbid []string) string {
	for _, f := range SNPPolicyFlags {
		set := policy&(1<<f.Bit) != 0
		switch {
		case !set && slices.Contains(require, f.Name):
			return fmt.Sprintf("guest policy %#x lacks %s, which the identity requires", policy, f.Name)
		case set && slices.Contains(forbid, f.Name):
			return fmt.Sprintf("guest policy %#x sets %s, which the identity forbids", policy, f.Name)
		}
	}
	return ""
}

// maskedEqual says whether got and want agree on every bit of mask; a
// got shorter than the mask does not.
func maskedEqual(got, want, mask []byte) bool {
	if len(got) < len(mask) || len(want) < len(mask) {
		return false
	}
	for i, m := range mask {
		if got[i]&m != want[i]&m {
			return false
		}
	}
	return true
}
