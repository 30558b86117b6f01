package attest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// Small claim builders.

func sgxClaims(opts ...func(*Claims)) *Claims {
	c := &Claims{Type: SGX, TCBStatus: TCBUpToDate, ReportData: Bytes{0xaa, 0xbb, 0xcc},
		SGX: &SGXIdentity{MRENCLAVE: Bytes{1, 2}, MRSIGNER: Bytes{3, 4}, ISVProdID: 7, ISVSVN: 3}}
	for _, o := range opts {
		o(c)
	}
	return c
}

func debug(c *Claims)     { c.Debug = true }
func simulated(c *Claims) { c.Insecure = true }
func tcb(s string) func(*Claims) {
	return func(c *Claims) { c.TCBStatus = s }
}

func u16(v uint16) *uint16 { return &v }

// manifestPCRs are the PCRs of an enclave whose orchestrator applied the
// manifests (one-byte digests), in order.
func manifestPCRs(manifests ...byte) map[int]Bytes {
	pcrs := map[int]Bytes{}
	for i, m := range manifests {
		pcrs[NitroManifestPCR+i] = NitroExtend(nil, []byte{m})
	}
	return pcrs
}

func TestPolicyCheck(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		claims *Claims
		check  Check  // "" accepts
		reason string // in the rejection
	}{
		{"default policy accepts an up-to-date release enclave", Policy{}, sgxClaims(), "", ""},
		{"debug under the default policy", Policy{}, sgxClaims(debug), CheckDebug, "debug-mode workload"},
		{"debug allowed", Policy{AllowDebug: true}, sgxClaims(debug), "", ""},
		{"TCB status not accepted by default", Policy{}, sgxClaims(tcb(TCBOutOfDate)), CheckTCB, `"OutOfDate" is not accepted (accepted: UpToDate)`},
		{"TCB status accepted", Policy{AcceptTCB: []string{TCBUpToDate, TCBSWHardeningNeeded}}, sgxClaims(tcb(TCBSWHardeningNeeded)), "", ""},
		{"simulation under the default policy", Policy{}, sgxClaims(simulated), CheckSimulation, "does not allow simulation"},
		{"simulation allowed", Policy{AllowSimulation: true}, sgxClaims(simulated), "", ""},
		{"simulation is checked before debug", Policy{}, sgxClaims(simulated, debug), CheckSimulation, ""},
		{"one of two identities matches", Policy{Identities: []Identity{
			{Type: SGX, MRENCLAVE: Bytes{9}}, {Type: SGX, MRSIGNER: Bytes{3, 4}, ISVProdID: u16(7), MinISVSVN: 3},
		}}, sgxClaims(), "", ""},
		{"no identity matches: every mismatch named", Policy{Identities: []Identity{
			{Type: SGX, MRENCLAVE: Bytes{9}}, {Type: SGX, MinISVSVN: 4}, {Type: TDX},
		}}, sgxClaims(), CheckIdentity, "identities[0]: MRENCLAVE is 0102, want 09; identities[1]: ISVSVN 3 is below the minimum 4; identities[2]: want tdx evidence, got sgx"},
		{"sgx attributes under the mask", Policy{Identities: []Identity{{Type: SGX, MRENCLAVE: Bytes{1, 2}, Attributes: Bytes{0x04, 0, 3}, AttributesMask: Bytes{0xfd, 0, 0xff}}}},
			sgxClaims(func(c *Claims) { c.SGX.Attributes = Bytes{0x06, 0, 3} }), "", ""},
		{"sgx attributes: KSS set where the mask pins it clear", Policy{Identities: []Identity{{Type: SGX, MRENCLAVE: Bytes{1, 2}, Attributes: Bytes{0x04, 0, 3}, AttributesMask: Bytes{0xff, 0, 0xff}}}},
			sgxClaims(func(c *Claims) { c.SGX.Attributes = Bytes{0x84, 0, 3} }), CheckIdentity, "ATTRIBUTES are 840003, want 040003 under the mask ff00ff"},
		{"sgx attributes pinned, none reported", Policy{Identities: []Identity{{Type: SGX, MRENCLAVE: Bytes{1, 2}, Attributes: Bytes{0x04}, AttributesMask: Bytes{0xff}}}},
			sgxClaims(), CheckIdentity, "ATTRIBUTES are"},
		{"product id", Policy{Identities: []Identity{{Type: SGX, ISVProdID: u16(8)}}}, sgxClaims(), CheckIdentity, "ISVPRODID is 7, want 8"},
		{"report data binding holds", Policy{ReportData: Bytes{0xaa, 0xbb}}, sgxClaims(), "", ""},
		{"report data binding fails", Policy{ReportData: Bytes{0xaa, 0xbd}}, sgxClaims(), CheckReportData, "aabbcc does not start with the expected aabd"},
		{"nitro PCRs", Policy{Identities: []Identity{{Type: Nitro, PCRs: map[int]Bytes{0: {1}, 8: {2}}}}},
			&Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nitro: &NitroIdentity{PCRs: map[int]Bytes{0: {1}, 8: {3}}}}, CheckIdentity, "PCR8 is 03, want 02"},
		{"nitro manifest pinned: the host applied another", Policy{Identities: []Identity{{Type: Nitro, Manifest: Bytes{0xa1}}}},
			&Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nitro: &NitroIdentity{PCRs: manifestPCRs(0xa2)}}, CheckIdentity, "the pinned manifest a1: the host changed what the enclave runs"},
		{"nitro manifest pinned: none applied", Policy{Identities: []Identity{{Type: Nitro, Manifest: Bytes{0xa1}}}},
			&Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nitro: &NitroIdentity{}}, CheckIdentity, "PCR16 (the first manifest the enclave applied) is , want"},
		{"nitro manifest pinned: the same, alone since boot", Policy{Identities: []Identity{{Type: Nitro, Manifest: Bytes{0xa1}}}},
			&Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nitro: &NitroIdentity{PCRs: manifestPCRs(0xa1)}}, "", ""},
		{"nitro manifest pinned: changed and changed back", Policy{Identities: []Identity{{Type: Nitro, Manifest: Bytes{0xa1}}}},
			&Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nitro: &NitroIdentity{PCRs: manifestPCRs(0xa1, 0xa2, 0xa1)}}, CheckIdentity, "PCR17 is"},
		{"nitro manifest pinned beside the report data of a key", Policy{ReportData: Bytes{0xcc}, Identities: []Identity{{Type: Nitro, Manifest: Bytes{0xa1}}}},
			&Claims{Type: Nitro, TCBStatus: TCBUpToDate, ReportData: Bytes{0xcc, 0xdd}, Nitro: &NitroIdentity{PCRs: manifestPCRs(0xa1)}}, "", ""},
		{"nonce of another challenge", Policy{Nonce: Bytes{1, 2}}, &Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nonce: Bytes{1, 3}}, CheckNonce, "nonce is 0103, want 0102"},
		{"nonce missing", Policy{Nonce: Bytes{1, 2}}, sgxClaims(), CheckNonce, "want 0102"},
		{"nonce matches", Policy{Nonce: Bytes{1, 2}}, &Claims{Type: Nitro, TCBStatus: TCBUpToDate, Nonce: Bytes{1, 2}}, "", ""},
		{"tdx RTMR by index", Policy{Identities: []Identity{{Type: TDX, RTMR: []Bytes{nil, {5}}}}},
			&Claims{Type: TDX, TCBStatus: TCBUpToDate, TDX: &TDXIdentity{RTMR: [4]Bytes{{1}, {5}}}}, "", ""},
		{"sim host data: the pod policy LAS vouches for", Policy{AllowSimulation: true, Identities: []Identity{{Type: Sim, HostData: Bytes{1}}}},
			&Claims{Type: Sim, Insecure: true, TCBStatus: TCBUpToDate, Sim: &SimIdentity{HostData: Bytes{2}}}, CheckIdentity, "host data is 02, want 01"},
		{"sim host data matches", Policy{AllowSimulation: true, Identities: []Identity{{Type: Sim, HostData: Bytes{1}}}},
			&Claims{Type: Sim, Insecure: true, TCBStatus: TCBUpToDate, Sim: &SimIdentity{HostData: Bytes{1}}}, "", ""},
		{"sim identity without LAS's host data", Policy{AllowSimulation: true, Identities: []Identity{{Type: Sim, HostData: Bytes{1}}}},
			&Claims{Type: Sim, Insecure: true, TCBStatus: TCBUpToDate}, CheckIdentity, "host data is missing, want 01"},
		{"tdx MRCONFIGID", Policy{Identities: []Identity{{Type: TDX, MRCONFIGID: Bytes{7}}}},
			&Claims{Type: TDX, TCBStatus: TCBUpToDate, TDX: &TDXIdentity{MRCONFIGID: Bytes{8}}}, CheckIdentity, "MRCONFIGID is 08, want 07"},
		{"snp measurement", Policy{Identities: []Identity{{Type: SNP, Measurement: Bytes{1}}}},
			&Claims{Type: SNP, TCBStatus: TCBUpToDate, SNP: &SNPIdentity{Measurement: Bytes{2}}}, CheckIdentity, "measurement is 02, want 01"},
		{"snp guest policy: debug on", Policy{AllowDebug: true, Identities: []Identity{{Type: SNP, Measurement: Bytes{1}, GuestPolicy: u64(0x30000)}}},
			&Claims{Type: SNP, TCBStatus: TCBUpToDate, SNP: &SNPIdentity{Measurement: Bytes{1}, GuestPolicy: 0xb0000}}, CheckIdentity, "guest policy is 0xb0000, want 0x30000"},
		{"snp guest policy matches", Policy{Identities: []Identity{{Type: SNP, Measurement: Bytes{1}, GuestPolicy: u64(0x30000)}}},
			&Claims{Type: SNP, TCBStatus: TCBUpToDate, SNP: &SNPIdentity{Measurement: Bytes{1}, GuestPolicy: 0x30000}}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Check(tt.claims)
			if got := CheckOf(err); got != tt.check {
				t.Fatalf("check %q (%v), want %q", got, err, tt.check)
			}
			if err != nil && !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("rejection %q does not say %q", err, tt.reason)
			}
		})
	}
}

func TestPolicyJSON(t *testing.T) {
	var p Policy
	doc := `{"identities":[{"type":"sgx","mrenclave":"68823bc6","minISVSVN":2}],"acceptTCB":["UpToDate","SWHardeningNeeded"],"reportData":"aabb"}`
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	if p.Identities[0].MRENCLAVE.String() != "68823bc6" || p.Identities[0].MinISVSVN != 2 || p.ReportData.String() != "aabb" {
		t.Errorf("decoded %+v", p)
	}
	if err := json.Unmarshal([]byte(`{"reportData":"xyz"}`), &p); err == nil {
		t.Error("non-hex report data accepted")
	}
}

func TestParseType(t *testing.T) {
	for _, s := range []string{"sgx", "TDX", " snp", "nitro", "sim"} {
		if _, err := ParseType(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if _, err := ParseType("sev"); CheckOf(err) != CheckType || !strings.Contains(err.Error(), `unknown evidence type "sev"`) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestParsePolicy(t *testing.T) {
	mr := strings.Repeat("ab", 32)
	m48 := strings.Repeat("cd", 48)
	for _, tc := range []struct {
		name, doc, err string // err "" accepts
	}{
		{"sgx identity and statuses", "acceptTCB: [UpToDate, SWHardeningNeeded]\nidentities:\n- type: sgx\n  mrenclave: " + mr + "\n  minISVSVN: 2\n", ""},
		{"json", `{"allowDebug": true, "identities": [{"type": "tdx", "mrtd": "` + m48 + `", "rtmr": ["", "` + m48 + `"]}]}`, ""},
		{"snp minimum TCB", "identities:\n- type: snp\n  measurement: " + m48 + "\n  minTCB: {snp: 8, microcode: 200}\n", ""},
		{"snp without its measurement", "identities:\n- type: snp\n  hostData: " + mr + "\n", "identities[0]: an snp identity pins the guest's launch measurement"},
		{"tdx MRCONFIGID alone", "identities:\n- type: tdx\n  mrConfigID: " + m48 + "\n", "a tdx identity pins the TD's launch measurement: give mrtd"},
		{"sgx signer without product", "identities:\n- type: sgx\n  mrsigner: " + mr + "\n", "give mrenclave, or mrsigner with isvProdID"},
		{"sgx attributes and mask", "identities:\n- type: sgx\n  mrenclave: " + mr + "\n  attributes: '04000000000000000300000000000000'\n  attributesMask: fdffffffffffffff0000000000000000\n", ""},
		{"sgx attributes without mask", "identities:\n- type: sgx\n  mrenclave: " + mr + "\n  attributes: '04000000000000000300000000000000'\n", "attributes and attributesMask go together"},
		{"sgx short attributes", "identities:\n- type: sgx\n  mrenclave: " + mr + "\n  attributes: '04'\n  attributesMask: 'ff'\n", "attributes has 1 bytes, a sgx attributes has 16"},
		{"sgx signer and product", "identities:\n- type: sgx\n  mrsigner: " + mr + "\n  isvProdID: 3\n", ""},
		{"nitro without PCR0", "identities:\n- type: nitro\n  pcrs: {8: " + m48 + "}\n", "give pcrs[0]"},
		{"nitro with no PCRs", "identities:\n- type: nitro\n", "without it any enclave of any AWS account matches"},
		{"nitro PCR0", "identities:\n- type: nitro\n  pcrs: {0: " + m48 + "}\n", ""},
		{"nitro manifest", "nonce: c0ffee\nidentities:\n- type: nitro\n  pcrs: {0: " + m48 + "}\n  manifest: " + mr + "\n", ""},
		{"nitro manifest of SHA-384 size", "identities:\n- type: nitro\n  pcrs: {0: " + m48 + "}\n  manifest: " + m48 + "\n", "manifest has 48 bytes, a nitro manifest has 32"},
		{"manifest on sgx", "identities:\n- type: sgx\n  mrenclave: " + mr + "\n  manifest: " + mr + "\n", "manifest is a nitro field"},
		{"unknown field", "allowDebugging: true\n", `unknown field "allowDebugging"`},
		{"misspelt TCB status", "acceptTCB: [UpTodate]\n", `acceptTCB[0]: unknown TCB status "UpTodate": use UpToDate, SWHardeningNeeded`},
		{"unknown identity type", "identities:\n- type: sev\n", `identities[0]: type "sev": use sgx, tdx, snp, nitro or sim`},
		{"sim identity: a pod policy digest", "identities:\n- type: sim\n  hostData: " + mr + "\n", ""},
		{"tdx MRCONFIGID", "identities:\n- type: tdx\n  mrtd: " + m48 + "\n  mrConfigID: " + m48 + "\n", ""},
		{"short MRCONFIGID", "identities:\n- type: tdx\n  mrtd: " + m48 + "\n  mrConfigID: " + mr + "\n", "mrConfigID has 32 bytes, a tdx mrConfigID has 48"},
		{"sim with an SGX field", "identities:\n- type: sim\n  mrenclave: " + mr + "\n", "mrenclave is a sgx field, the identity's type is sim"},
		{"short MRENCLAVE", "identities:\n- type: sgx\n  mrenclave: abcd\n", "identities[0]: mrenclave has 2 bytes, a sgx mrenclave has 32 (64 hex digits)"},
		{"field of another type", "identities:\n- type: sgx\n  mrtd: " + m48 + "\n", "identities[0]: mrtd is a tdx field, the identity's type is sgx"},
		{"RTMR4", "identities:\n- type: tdx\n  rtmr: ['', '', '', '', '']\n", "rtmr has 5 entries"},
		{"short RTMR", "identities:\n- type: tdx\n  rtmr: ['" + mr + "']\n", "rtmr[0] has 32 bytes"},
		{"PCR of SHA-256 size", "identities:\n- type: nitro\n  pcrs: {0: " + mr + "}\n", "pcrs[0] has 32 bytes"},
		{"PCR index", "identities:\n- type: nitro\n  pcrs: {40: " + m48 + "}\n", "pcrs: index 40"},
		{"not hex", "reportData: xyz\n", "not hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tc.doc))
			if tc.err == "" {
				if err != nil || p == nil {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want %q", err, tc.err)
			}
		})
	}
}

// Any input either fails with an error or yields a policy that validates
// and survives a JSON round trip unchanged.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("acceptTCB: [UpToDate]\nidentities:\n- type: sgx\n  minISVSVN: 2\n"))
	f.Add([]byte(`{"identities": [{"type": "nitro", "pcrs": {"0": "` + strings.Repeat("00", 48) + `"}}], "allowSimulation": true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		attesttest.CountExec()
		p, err := ParsePolicy(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		q, err := ParsePolicy(again)
		if err != nil {
			t.Fatalf("a parsed policy does not parse again: %v\n%s", err, again)
		}
		if b, _ := json.Marshal(q); string(b) != string(again) {
			t.Fatalf("round trip changed the policy:\n%s\n%s", again, b)
		}
	})
}

func u64(v uint64) *uint64 { return &v }
