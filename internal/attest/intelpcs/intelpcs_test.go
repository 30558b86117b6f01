package intelpcs

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-tdx-guest/pcs"

	"github.com/cloister-cc/cloister/internal/attest"
)

func TestEmbeddedRootIsIntels(t *testing.T) {
	d := sha256.Sum256(Root().Raw)
	if hex.EncodeToString(d[:]) != RootSHA256 || Root().Subject.CommonName != "Intel SGX Root CA" {
		t.Errorf("embedded root %s (%x)", Root().Subject, d)
	}
}

func TestConverge(t *testing.T) {
	for _, tc := range []struct{ platform, component, want string }{
		{attest.TCBUpToDate, attest.TCBUpToDate, attest.TCBUpToDate},
		{attest.TCBSWHardeningNeeded, attest.TCBUpToDate, attest.TCBSWHardeningNeeded},
		{attest.TCBUpToDate, attest.TCBOutOfDate, attest.TCBOutOfDate},
		{attest.TCBSWHardeningNeeded, attest.TCBOutOfDate, attest.TCBOutOfDate},
		{attest.TCBConfigurationNeeded, attest.TCBOutOfDate, attest.TCBOutOfDateConfigurationNeeded},
		{attest.TCBConfigurationAndSWHardeningNeeded, attest.TCBOutOfDate, attest.TCBOutOfDateConfigurationNeeded},
		{attest.TCBOutOfDate, attest.TCBOutOfDate, attest.TCBOutOfDate},
		{attest.TCBUpToDate, attest.TCBRevoked, attest.TCBRevoked},
		{attest.TCBRevoked, attest.TCBUpToDate, attest.TCBRevoked},
	} {
		if got := converge(tc.platform, tc.component); got != tc.want {
			t.Errorf("converge(%s, %s) = %s, want %s", tc.platform, tc.component, got, tc.want)
		}
	}
}

// level builds a TCB level: 16 SGX SVNs of sgx, PCESVN pce, and (when
// tdx is not nil) the 16 TDX SVNs given.
func level(status string, sgxSVN byte, pce uint16, tdx ...byte) tcbLevel {
	var l tcbLevel
	l.TCBStatus, l.TCB.PCESVN = status, pce
	for range 16 {
		l.TCB.SGXComponents = append(l.TCB.SGXComponents, svn{sgxSVN})
	}
	for i := range tdx {
		l.TCB.TDXComponents = append(l.TCB.TDXComponents, svn{tdx[i]})
	}
	return l
}

func sixteen(prefix ...byte) []byte { return append(prefix, make([]byte, 16-len(prefix))...) }

func platform(sgxSVN byte, pce uint16, tee []byte) Platform {
	p := Platform{PCK: &pcs.PckExtensions{TCB: pcs.PckCertTCB{PCESvn: pce, CPUSvnComponents: sixteen()}}}
	for i := range p.PCK.TCB.CPUSvnComponents {
		p.PCK.TCB.CPUSvnComponents[i] = sgxSVN
	}
	if tee != nil {
		p.TDX = &TDXModule{TEETCBSVN: tee, MRSIGNERSEAM: make([]byte, 48), SEAMAttributes: make([]byte, 8)}
	}
	return p
}

func TestPlatformStatus(t *testing.T) {
	levels := []tcbLevel{
		level(attest.TCBUpToDate, 7, 11, sixteen(5, 0, 7)...),
		level(attest.TCBSWHardeningNeeded, 6, 11, sixteen(3, 0, 5)...),
		level(attest.TCBOutOfDate, 2, 5, sixteen(0, 0, 2)...),
	}
	for _, tc := range []struct {
		name    string
		p       Platform
		version int
		want    string // "" = below every level
	}{
		{"SGX at the top level", platform(7, 11, nil), 3, attest.TCBUpToDate},
		{"SGX one SVN lower", platform(6, 11, nil), 3, attest.TCBSWHardeningNeeded},
		{"SGX with an old PCE", platform(7, 10, nil), 3, attest.TCBOutOfDate},
		{"SGX below every level", platform(1, 11, nil), 3, ""},
		{"TDX at the top level", platform(7, 11, sixteen(5, 0, 7)), 3, attest.TCBUpToDate},
		{"TDX with an old microcode SVN", platform(7, 11, sixteen(5, 0, 6)), 3, attest.TCBSWHardeningNeeded},
		// Module version 1: bytes 0 and 1 are the module's identity's to judge.
		{"TDX module version 1 skips the module SVNs", platform(7, 11, sixteen(1, 1, 7)), 3, attest.TCBUpToDate},
		{"TDX module version 0 compares them", platform(7, 11, sixteen(1, 0, 7)), 3, attest.TCBOutOfDate},
		{"TCB info v2 compares them", platform(7, 11, sixteen(1, 1, 7)), 2, attest.TCBOutOfDate},
		{"TDX below every level", platform(7, 11, sixteen(0, 0, 1)), 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tee []byte
			if tc.p.TDX != nil {
				tee = tc.p.TDX.TEETCBSVN
			}
			got, err := levelOf(tc.p, &tcbInfo{Version: tc.version, FMSPC: "00606a000000", TCBLevels: levels}, tee)
			if tc.want == "" {
				if attest.CheckOf(err) != attest.CheckTCB || !strings.Contains(err.Error(), "below every TCB level") {
					t.Errorf("got %q, %v; want a tcb-status rejection", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestModuleStatus(t *testing.T) {
	zeros48, zeros8, ones8 := strings.Repeat("00", 48), strings.Repeat("00", 8), strings.Repeat("FF", 8)
	info := &tcbInfo{
		Version:   3,
		TDXModule: &moduleIdentity{MRSIGNER: zeros48, Attributes: zeros8, AttributesMask: ones8},
		TDXModuleIdentities: []moduleIdentity{{
			ID: "TDX_01", MRSIGNER: zeros48, Attributes: zeros8, AttributesMask: ones8,
			TCBLevels: []tcbLevel{{TCBStatus: attest.TCBUpToDate}, {TCBStatus: attest.TCBOutOfDate}},
		}, {
			ID: "TDX_03", MRSIGNER: strings.Repeat("ab", 48), Attributes: zeros8, AttributesMask: ones8,
		}},
	}
	info.TDXModuleIdentities[0].TCBLevels[0].TCB.ISVSVN = 4
	info.TDXModuleIdentities[0].TCBLevels[1].TCB.ISVSVN = 2
	seamAttrs := func(b byte) *TDXModule {
		return &TDXModule{TEETCBSVN: sixteen(4, 1), MRSIGNERSEAM: make([]byte, 48), SEAMAttributes: []byte{b, 0, 0, 0, 0, 0, 0, 0}}
	}
	for _, tc := range []struct {
		name   string
		m      *TDXModule
		want   string
		check  attest.Check
		reason string
	}{
		{"module SVN at the top level", platform(0, 0, sixteen(4, 1)).TDX, attest.TCBUpToDate, "", ""},
		{"module SVN of an old level", platform(0, 0, sixteen(3, 1)).TDX, attest.TCBOutOfDate, "", ""},
		{"module SVN below every level", platform(0, 0, sixteen(1, 1)).TDX, "", attest.CheckTCB, "below every TCB level of TDX_01"},
		{"no identity for the major version", platform(0, 0, sixteen(4, 2)).TDX, "", attest.CheckCollateral, "no identity TDX_02"},
		{"another signer", platform(0, 0, sixteen(4, 3)).TDX, "", attest.CheckCollateral, "MRSIGNERSEAM is not the TCB info's TDX_03 signer"},
		{"SEAM attributes outside the mask", seamAttrs(1), "", attest.CheckCollateral, "SEAM attributes"},
		{"major version 0: tdxModule's signer only", platform(0, 0, sixteen(9, 0)).TDX, attest.TCBUpToDate, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := moduleStatus(tc.m, tc.m.TEETCBSVN, info)
			if tc.check != "" {
				if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("got %q, %v; want %s (%q)", got, err, tc.check, tc.reason)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// A TD 1.5 report is judged by the module it was launched under and the
// one running now (TEE_TCB_SVN2), and advised to relaunch when only the
// first is out of date.
func TestTDStatusTD15(t *testing.T) {
	module := &moduleIdentity{MRSIGNER: strings.Repeat("00", 48), Attributes: strings.Repeat("00", 8), AttributesMask: strings.Repeat("FF", 8)}
	info := &tcbInfo{Version: 3, FMSPC: "00606a000000", TDXModule: module, TCBLevels: []tcbLevel{
		level(attest.TCBUpToDate, 7, 11, sixteen(5, 0, 7)...),
		level(attest.TCBConfigurationNeeded, 7, 11, sixteen(4, 0, 7)...),
		level(attest.TCBOutOfDate, 2, 5, sixteen(0, 0, 2)...),
	}}
	td15 := func(launch, current []byte) Platform {
		p := platform(7, 11, launch)
		p.TDX.TEETCBSVN2 = current
		return p
	}
	for _, tc := range []struct {
		name   string
		p      Platform
		qe     string
		want   string
		reason string
	}{
		{"TD 1.0: the launch module only", platform(7, 11, sixteen(1, 0, 2)), attest.TCBUpToDate, attest.TCBOutOfDate, ""},
		{"no update: TEE_TCB_SVN2 is TEE_TCB_SVN", td15(sixteen(1, 0, 2), sixteen(1, 0, 2)), attest.TCBUpToDate, attest.TCBOutOfDate, ""},
		{"TEE_TCB_SVN2 of zeros is none", td15(sixteen(5, 0, 7), sixteen()), attest.TCBUpToDate, attest.TCBUpToDate, ""},
		{"updated to an up-to-date module: relaunch advised", td15(sixteen(1, 0, 2), sixteen(5, 0, 7)), attest.TCBUpToDate, attest.TCBTDRelaunchAdvised, ""},
		{"updated to a module needing configuration", td15(sixteen(1, 0, 2), sixteen(4, 0, 7)), attest.TCBUpToDate, attest.TCBTDRelaunchAdvisedConfigurationNeeded, ""},
		{"updated but the quoting enclave out of date", td15(sixteen(1, 0, 2), sixteen(5, 0, 7)), attest.TCBOutOfDate, attest.TCBOutOfDate, ""},
		{"launched up to date, running older", td15(sixteen(5, 0, 7), sixteen(1, 0, 2)), attest.TCBUpToDate, attest.TCBUpToDate, ""},
		{"running a module below every level", td15(sixteen(5, 0, 7), sixteen(0, 0, 1)), attest.TCBUpToDate, "", "the TDX module now running (TEE_TCB_SVN2 0000010000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tdStatus(tc.p, info, tc.qe)
			if tc.want == "" {
				if attest.CheckOf(err) != attest.CheckTCB || !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("got %q, %v; want a tcb-status rejection (%q)", got, err, tc.reason)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}
