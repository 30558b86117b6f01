package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
)

// The identity a CAS in a confidential VM shows its peers pins what no
// other pod of its runtime class has, on SEV-SNP and TDX alike; a VM
// without host data (no pod policy of its own) has no identity of CAS,
// and a pod of the same runtime class with another policy does not meet
// CAS's.
func TestCASIdentity(t *testing.T) {
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	snp := func(hostData []byte) *attest.Claims {
		return &attest.Claims{Type: attest.SNP, TCBStatus: attest.TCBUpToDate, SNP: &attest.SNPIdentity{Measurement: fill(1, 48), HostData: hostData}}
	}
	tdx := func(configID []byte, rtmr2 byte) *attest.Claims {
		return &attest.Claims{Type: attest.TDX, TCBStatus: attest.TCBUpToDate, TDX: &attest.TDXIdentity{MRTD: fill(1, 48), MRCONFIGID: configID,
			RTMR: [4]attest.Bytes{fill(2, 48), fill(3, 48), fill(rtmr2, 48), fill(5, 48)}}}
	}
	for _, tc := range []struct {
		name          string
		cas, stranger *attest.Claims
	}{
		{"snp", snp(fill(0xCA, 32)), snp(fill(0xBB, 32))},
		{"tdx, another pod policy", tdx(fill(0xCA, 48), 4), tdx(fill(0xBB, 48), 4)},
		{"tdx, another command line", tdx(fill(0xCA, 48), 4), tdx(fill(0xCA, 48), 9)},
	} {
		id, err := CASIdentityOf(tc.cas)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p := attest.Policy{Identities: []attest.Identity{id}}
		if err := p.Check(tc.cas); err != nil {
			t.Errorf("%s: CAS itself: %v", tc.name, err)
		}
		if err := p.Check(tc.stranger); attest.CheckOf(err) != attest.CheckIdentity {
			t.Errorf("%s: another VM of the runtime class: %v", tc.name, err)
		}
		if id.Type == attest.TDX && len(id.RTMR) != 3 {
			t.Errorf("%s: %d RTMRs pinned, want RTMR0-2 (RTMR3 moves at run time)", tc.name, len(id.RTMR))
		}
	}
	for name, c := range map[string]*attest.Claims{
		"snp without host data":  snp(make([]byte, 32)),
		"tdx without mrConfigID": tdx(make([]byte, 48), 4),
	} {
		if _, err := CASIdentityOf(c); !errors.Is(err, ErrSharedIdentity) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := CASIdentityOf(&attest.Claims{Type: attest.Sim}); err == nil {
		t.Error("simulated claims gave a confidential VM's identity")
	}
	for _, tc := range []struct {
		id   attest.Identity
		want string
	}{
		{attest.Identity{Type: attest.SNP, Measurement: fill(1, 48)}, "without hostData"},
		{attest.Identity{Type: attest.TDX, MRTD: fill(1, 48), MRCONFIGID: fill(2, 48)}, "with 0 RTMRs"},
		{attest.Identity{Type: attest.TDX, MRTD: fill(1, 48), MRCONFIGID: fill(2, 48), RTMR: []attest.Bytes{fill(1, 48), nil, fill(1, 48)}}, "rtmr[1] empty"},
		{attest.Identity{Type: attest.TDX, MRTD: fill(1, 48), RTMR: []attest.Bytes{fill(1, 48), fill(1, 48), fill(1, 48)}}, "without mrConfigID"},
	} {
		if err := CheckCASPolicy(&attest.Policy{Identities: []attest.Identity{tc.id}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.id, err, tc.want)
		}
	}
}
