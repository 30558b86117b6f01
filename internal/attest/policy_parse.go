package attest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// TCBStatuses are the statuses a policy may accept.
var TCBStatuses = []string{
	TCBUpToDate, TCBSWHardeningNeeded, TCBConfigurationNeeded, TCBConfigurationAndSWHardeningNeeded,
	TCBOutOfDate, TCBOutOfDateConfigurationNeeded, TCBRevoked,
	TCBTDRelaunchAdvised, TCBTDRelaunchAdvisedConfigurationNeeded,
}

// ParsePolicy reads a policy (YAML or JSON); unknown fields, unknown TCB
// statuses and identities that could never match are errors naming the
// field, not a policy that silently refuses or accepts everything.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks the policy's fields; the error names each bad one.
func (p *Policy) Validate() error {
	var errs []error
	if err := ValidateTCBStatuses("acceptTCB", p.AcceptTCB); err != nil {
		errs = append(errs, err)
	}
	for i := range p.Identities {
		if err := p.Identities[i].validate(); err != nil {
			errs = append(errs, fmt.Errorf("identities[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// ValidateTCBStatuses checks each status is one Intel defines (names are
// case-sensitive, as in PCS collateral).
func ValidateTCBStatuses(field string, statuses []string) error {
	for i, s := range statuses {
		if !slices.Contains(TCBStatuses, s) {
			return fmt.Errorf("%s[%d]: unknown TCB status %q: use %s", field, i, s, strings.Join(TCBStatuses, ", "))
		}
	}
	return nil
}

// validate checks the identity's fields belong to its type and have the
// sizes the hardware measures, so a typo cannot make it never match.
func (id *Identity) validate() error {
	type field struct {
		name  string
		set   bool
		size  int // bytes; 0: not a measurement
		got   int
		types []Type
	}
	fields := []field{
		{"mrenclave", id.MRENCLAVE != nil, 32, len(id.MRENCLAVE), []Type{SGX}},
		{"mrsigner", id.MRSIGNER != nil, 32, len(id.MRSIGNER), []Type{SGX}},
		{"isvProdID", id.ISVProdID != nil, 0, 0, []Type{SGX}},
		{"minISVSVN", id.MinISVSVN != 0, 0, 0, []Type{SGX}},
		{"attributes", id.Attributes != nil, 16, len(id.Attributes), []Type{SGX}},
		{"attributesMask", id.AttributesMask != nil, 16, len(id.AttributesMask), []Type{SGX}},
		{"mrtd", id.MRTD != nil, 48, len(id.MRTD), []Type{TDX}},
		{"rtmr", id.RTMR != nil, 0, 0, []Type{TDX}},
		{"mrConfigID", id.MRCONFIGID != nil, 48, len(id.MRCONFIGID), []Type{TDX}},
		{"measurement", id.Measurement != nil, 48, len(id.Measurement), []Type{SNP}},
		{"hostData", id.HostData != nil, 32, len(id.HostData), []Type{SNP, Sim}},
		{"minTCB", id.MinTCB != nil, 0, 0, []Type{SNP}},
		{"guestPolicy", id.GuestPolicy != nil, 0, 0, []Type{SNP}},
		{"requirePolicyFlags", id.RequirePolicyFlags != nil, 0, 0, []Type{SNP}},
		{"forbidPolicyFlags", id.ForbidPolicyFlags != nil, 0, 0, []Type{SNP}},
		{"mrServiceTD", id.MRServiceTD != nil, 48, len(id.MRServiceTD), []Type{TDX}},
		{"pcrs", id.PCRs != nil, 0, 0, []Type{Nitro}},
		{"manifest", id.Manifest != nil, 32, len(id.Manifest), []Type{Nitro}},
	}
	if _, err := ParseType(string(id.Type)); err != nil {
		return fmt.Errorf("type %q: use sgx, tdx, snp, nitro or sim", id.Type)
	}
	for _, f := range fields {
		switch {
		case f.set && !slices.Contains(f.types, id.Type):
			return fmt.Errorf("%s is a %s field, the identity's type is %s", f.name, f.types[0], id.Type)
		case f.set && f.size > 0 && f.got != f.size:
			return fmt.Errorf("%s has %d bytes, a %s %s has %d (%d hex digits)", f.name, f.got, id.Type, f.name, f.size, 2*f.size)
		}
	}
	if (id.Attributes == nil) != (id.AttributesMask == nil) {
		return errors.New("attributes and attributesMask go together: the mask says which bits of attributes are pinned")
	}
	if len(id.RTMR) > 4 {
		return fmt.Errorf("rtmr has %d entries, TDX has RTMR0-3", len(id.RTMR))
	}
	for i, r := range id.RTMR {
		if len(r) != 0 && len(r) != 48 {
			return fmt.Errorf("rtmr[%d] has %d bytes, an RTMR has 48 (96 hex digits; empty matches any)", i, len(r))
		}
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"requirePolicyFlags", id.RequirePolicyFlags}, {"forbidPolicyFlags", id.ForbidPolicyFlags}} {
		for i, n := range list.names {
			if !slices.ContainsFunc(SNPPolicyFlags, func(f SNPPolicyFlag) bool { return f.Name == n }) {
				return fmt.Errorf("%s[%d]: unknown guest policy flag %q: use %s", list.field, i, n, strings.Join(SNPPolicyFlagNames(^uint64(0)), ", "))
			}
			if slices.Contains(id.RequirePolicyFlags, n) && slices.Contains(id.ForbidPolicyFlags, n) {
				return fmt.Errorf("%s[%d]: %s is both required and forbidden: the identity could never match", list.field, i, n)
			}
		}
	}
	for i, v := range id.PCRs {
		if i < 0 || i > 31 {
			return fmt.Errorf("pcrs: index %d, Nitro PCRs are 0-31", i)
		}
		if len(v) != 48 {
			return fmt.Errorf("pcrs[%d] has %d bytes, a Nitro PCR (SHA-384) has 48 (96 hex digits)", i, len(v))
		}
	}
	return id.measured()
}

// measured refuses a hardware identity that does not pin what was
// launched: without it the identity admits any workload of that TEE
// type, whoever built it. Host data and MRCONFIGID do not count, since
// the host chooses them.
func (id *Identity) measured() error {
	switch id.Type {
	case SGX:
		if id.MRENCLAVE == nil && (id.MRSIGNER == nil || id.ISVProdID == nil) {
			return errors.New("an sgx identity pins the enclave: give mrenclave, or mrsigner with isvProdID (the signer's key alone admits every enclave it ever signed)")
		}
	case TDX:
		if id.MRTD == nil {
			return errors.New("a tdx identity pins the TD's launch measurement: give mrtd (mrConfigID and rtmr add to it; the host chooses mrConfigID)")
		}
	case SNP:
		if id.Measurement == nil {
			return errors.New("an snp identity pins the guest's launch measurement: give measurement (hostData adds to it; the host chooses it)")
		}
	case Nitro:
		if id.PCRs[0] == nil {
			return errors.New("a nitro identity pins the enclave image: give pcrs[0] (without it any enclave of any AWS account matches)")
		}
	}
	return nil
}

// PodRTMRs is how many RTMRs a TDX identity of a pod pins: RTMR0-2, the
// firmware's configuration, the kernel and initrd, and the command line
// (RTMR3 is extended at run time).
const PodRTMRs = 3

// ErrSharedByRuntimeClass: an identity that every pod (VM) of a
// confidential runtime class meets, whatever it runs.
var ErrSharedByRuntimeClass = errors.New("every pod of its runtime class meets it")

// CheckPinsPod refuses an SEV-SNP or TDX identity that pins only what a
// confidential runtime class gives every pod: a launch measurement (or
// MRTD) covers the VM's firmware, kernel, initrd and command line, which
// all its pods share; the host data (SEV-SNP hostData, TDX mrConfigID) is
// the pod's own policy, and on TDX the kernel, initrd and command line are
// measured into RTMR0-2, not MRTD. Other types pass.
func (id *Identity) CheckPinsPod() error {
	zero := func(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }
	switch id.Type {
	case SNP:
		if zero(id.HostData) {
			return fmt.Errorf("an snp identity without hostData: %w (hostData is the pod's policy digest; cloister generate sets it)", ErrSharedByRuntimeClass)
		}
	case TDX:
		if zero(id.MRCONFIGID) {
			return fmt.Errorf("a tdx identity without mrConfigID: %w (mrConfigID is the pod's policy digest; cloister generate sets it)", ErrSharedByRuntimeClass)
		}
		if len(id.RTMR) < PodRTMRs {
			return fmt.Errorf("a tdx identity with %d RTMRs: pin RTMR0 to RTMR2 (firmware configuration, kernel and initrd, command line): MRTD covers the firmware alone", len(id.RTMR))
		}
		for i := range PodRTMRs {
			if len(id.RTMR[i]) == 0 {
				return fmt.Errorf("a tdx identity with rtmr[%d] empty: pin RTMR0 to RTMR2 (firmware configuration, kernel and initrd, command line): MRTD covers the firmware alone", i)
			}
		}
	}
	return nil
}
