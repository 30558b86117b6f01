// Package attest owns hardware evidence and what it proves: the Claims
// every verifier returns (SGX DCAP, TDX, SEV-SNP, Nitro and the insecure
// simulation), the named rejections, and the policy check over Claims
// that CAS and the CLI share. Verification is offline: roots are embedded,
// collateral and the verification time are the caller's.
package attest

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Type names an evidence format.
type Type string

// The evidence formats.
const (
	SGX   Type = "sgx"
	TDX   Type = "tdx"
	SNP   Type = "snp"
	Nitro Type = "nitro"
	Sim   Type = "sim"
)

// Types lists every format, in the order the CLI shows them.
var Types = []Type{SGX, TDX, SNP, Nitro, Sim}

// ParseType accepts a format name.
func ParseType(s string) (Type, error) {
	for _, t := range Types {
		if strings.EqualFold(strings.TrimSpace(s), string(t)) {
			return t, nil
		}
	}
	return "", Reject(CheckType, "unknown evidence type %q: use sgx, tdx, snp, nitro or sim", s)
}

// Evidence is what a workload presents.
type Evidence struct {
	Type Type   `json:"type"`
	Raw  []byte `json:"raw"` // base64 in JSON
}

// Bytes prints as lowercase hex in JSON and text.
type Bytes []byte

func (b Bytes) String() string { return hex.EncodeToString(b) }

// MarshalText implements encoding.TextMarshaler.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(b)), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *Bytes) UnmarshalText(text []byte) error {
	d, err := hex.DecodeString(string(text))
	if err != nil {
		return fmt.Errorf("not hex: %w", err)
	}
	*b = d
	return nil
}

// TCB statuses, as Intel's PCS names them; SNP and Nitro evidence that
// verifies is UpToDate.
const (
	TCBUpToDate                          = "UpToDate"
	TCBSWHardeningNeeded                 = "SWHardeningNeeded"
	TCBConfigurationNeeded               = "ConfigurationNeeded"
	TCBConfigurationAndSWHardeningNeeded = "ConfigurationAndSWHardeningNeeded"
	TCBOutOfDate                         = "OutOfDate"
	TCBOutOfDateConfigurationNeeded      = "OutOfDateConfigurationNeeded"
	TCBRevoked                           = "Revoked"
	// A TD launched under a TDX module that is out of date, now running
	// one that is not (TD 1.5, a TD-preserving update): relaunching it
	// brings its measured module up to date.
	TCBTDRelaunchAdvised                    = "TDRelaunchAdvised"
	TCBTDRelaunchAdvisedConfigurationNeeded = "TDRelaunchAdvisedConfigurationNeeded"
)

// Claims are what verified evidence says, the same shape for every type.
type Claims struct {
	Type Type `json:"type"`
	// Insecure marks evidence no hardware vouches for (simulation).
	Insecure bool `json:"insecure,omitempty"`
	// TestRoot marks evidence whose chain ends in a test's root, not the
	// vendor's: the verifier was told to trust test roots (an insecure
	// flag), so no hardware vouches for it either.
	TestRoot  bool   `json:"insecureTestRoot,omitempty"`
	Debug     bool   `json:"debug"`
	TCBStatus string `json:"tcbStatus,omitempty"`
	// ReportData is what the workload bound into the evidence (SGX/TDX
	// report data, SNP report data, Nitro user data).
	ReportData Bytes `json:"reportData,omitempty"`
	Nonce      Bytes `json:"nonce,omitempty"`
	PublicKey  Bytes `json:"publicKey,omitempty"`
	// NotBefore and NotAfter bound when the evidence and its chain verify.
	NotBefore time.Time `json:"notBefore,omitzero"`
	NotAfter  time.Time `json:"notAfter,omitzero"`

	SGX   *SGXIdentity   `json:"sgx,omitempty"`
	TDX   *TDXIdentity   `json:"tdx,omitempty"`
	SNP   *SNPIdentity   `json:"snp,omitempty"`
	Nitro *NitroIdentity `json:"nitro,omitempty"`
	Sim   *SimIdentity   `json:"sim,omitempty"`
}

// SimIdentity is what LAS vouches for in simulated evidence.
type SimIdentity struct {
	// HostData is the calling pod's policy digest, as SNP's host data
	// carries it on hardware.
	HostData Bytes `json:"hostData,omitempty"`
}

// SGXIdentity is an enclave's identity.
type SGXIdentity struct {
	MRENCLAVE Bytes  `json:"mrenclave"`
	MRSIGNER  Bytes  `json:"mrsigner"`
	ISVProdID uint16 `json:"isvProdID"`
	ISVSVN    uint16 `json:"isvSVN"`
	// Attributes are the enclave's ATTRIBUTES: flags (DEBUG, MODE64BIT,
	// KSS, ...), then XFRM.
	Attributes Bytes `json:"attributes,omitempty"`
}

// TDXIdentity is a trust domain's identity.
type TDXIdentity struct {
	MRTD         Bytes    `json:"mrtd"`
	RTMR         [4]Bytes `json:"rtmr"`
	MRSEAM       Bytes    `json:"mrseam"`
	MRCONFIGID   Bytes    `json:"mrConfigID"`
	TDAttributes Bytes    `json:"tdAttributes"`
	// TEETCBSVN is the TCB SVN of the TDX module the TD was launched
	// under; TEETCBSVN2 (TD 1.5 reports) that of the module now running,
	// which differs after a TD-preserving module update.
	TEETCBSVN  Bytes `json:"teeTCBSVN"`
	TEETCBSVN2 Bytes `json:"teeTCBSVN2,omitempty"`
	// MRServiceTD (TD 1.5 reports) measures the service TDs bound to the
	// TD (a migration TD, for one); zero when none is.
	MRServiceTD Bytes `json:"mrServiceTD,omitempty"`
}

// SNPIdentity is a confidential VM's identity.
type SNPIdentity struct {
	// Version is the report's version (2 to 5).
	Version     uint32 `json:"version"`
	Measurement Bytes  `json:"measurement"`
	HostData    Bytes  `json:"hostData"`
	GuestPolicy uint64 `json:"guestPolicy"`
	// PolicyFlags names the guest policy's flags that are set
	// (SNPPolicyFlags), for reading and for a policy's
	// requirePolicyFlags and forbidPolicyFlags.
	PolicyFlags []string `json:"policyFlags"`
	ReportedTCB uint64   `json:"reportedTCB"`
	// TCB is ReportedTCB by component (the layout depends on the product
	// line).
	TCB SNPTCB `json:"tcb"`
}

// SNPPolicyFlags are the flag bits of an SEV-SNP guest policy by name,
// as the firmware ABI (up to 1.58) defines them; bits 0-15 are the
// minimum ABI version and bit 17 is reserved, always set.
var SNPPolicyFlags = []SNPPolicyFlag{
	{"smt", 16}, {"migrateMA", 18}, {"debug", 19}, {"singleSocket", 20}, {"cxlAllowed", 21},
	{"memAES256XTS", 22}, {"raplDisabled", 23}, {"ciphertextHidingDRAM", 24}, {"pageSwapDisable", 25},
}

// SNPPolicyFlag is a guest policy flag: its name and bit.
type SNPPolicyFlag struct {
	Name string
	Bit  uint
}

// SNPPolicyFlagNames names the flags set in a guest policy.
func SNPPolicyFlagNames(policy uint64) []string {
	out := []string{}
	for _, f := range SNPPolicyFlags {
		if policy&(1<<f.Bit) != 0 {
			out = append(out, f.Name)
		}
	}
	return out
}

// SNPTCB is an SEV-SNP TCB version by component: security patch levels
// of the firmware parts and the microcode.
type SNPTCB struct {
	FMC        uint8 `json:"fmc,omitempty"` // Turin and later
	Bootloader uint8 `json:"bootloader"`
	TEE        uint8 `json:"tee"`
	SNP        uint8 `json:"snp"`
	Microcode  uint8 `json:"microcode"`
}

// below names the first component of t lower than min's, or "".
func (t SNPTCB) below(min SNPTCB) string {
	for _, c := range []struct {
		name      string
		have, min uint8
	}{{"FMC", t.FMC, min.FMC}, {"bootloader", t.Bootloader, min.Bootloader}, {"TEE", t.TEE, min.TEE}, {"SNP firmware", t.SNP, min.SNP}, {"microcode", t.Microcode, min.Microcode}} {
		if c.have < c.min {
			return fmt.Sprintf("%s SVN %d is below the minimum %d", c.name, c.have, c.min)
		}
	}
	return ""
}

// NitroIdentity is an enclave image's identity.
type NitroIdentity struct {
	ModuleID string        `json:"moduleID"`
	PCRs     map[int]Bytes `json:"pcrs"`
}
