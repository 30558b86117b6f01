package verify

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
)

func TestDecode(t *testing.T) {
	bin := []byte{0x03, 0x00, 0x02, 0x00, 0xff, 0xfe}
	for name, in := range map[string][]byte{
		"raw":             bin,
		"base64":          []byte(base64.StdEncoding.EncodeToString(bin)),
		"base64 wrapped":  []byte(base64.StdEncoding.EncodeToString(bin)[:4] + "\n" + base64.StdEncoding.EncodeToString(bin)[4:] + "\n"),
		"base64 unpadded": []byte(base64.RawStdEncoding.EncodeToString(bin)),
	} {
		if got := Decode(in); string(got) != string(bin) {
			t.Errorf("%s: Decode = %x", name, got)
		}
	}
	if got := Decode([]byte(`{"payload":"x"}`)); string(got) != `{"payload":"x"}` {
		t.Errorf("JSON taken for base64: %q", got)
	}
}

// Base64 text (wrapped or not) of any bytes decodes to them.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x03, 0x00, 0x02, 0x00})
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		attesttest.CountExec()
		if len(data) == 0 {
			return
		}
		text := base64.StdEncoding.EncodeToString(data)
		if got := Decode([]byte(text)); string(got) != string(data) {
			t.Fatalf("Decode(%q) = %x, want %x", text, got, data)
		}
		if len(text) > 8 {
			wrapped := text[:8] + "\n" + text[8:] + "\n"
			if got := Decode([]byte(wrapped)); string(got) != string(data) {
				t.Fatalf("Decode(%q) = %x, want %x", wrapped, got, data)
			}
		}
	})
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]time.Time{
		"1671497404":           time.Unix(1671497404, 0),
		"2022-12-20T00:50:04Z": time.Unix(1671497404, 0),
	} {
		if got, err := ParseTime(in); err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "12x", "20/12/2022"} {
		if _, err := ParseTime(bad); err == nil || !strings.Contains(err.Error(), "use RFC 3339") || strings.Contains(err.Error(), "--") {
			t.Errorf("ParseTime(%q) = %v", bad, err)
		}
	}
}

func TestIntelCollateral(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tcb_info_v3.json")
	write("qe_identity_v2.json")
	if f, err := ReadFolder(dir); err != nil || f.Intel.SigningChain != nil || string(f.Intel.QEIdentity) != "qe_identity_v2.json" {
		t.Errorf("missing chain: %q %v, want the rest read (the verifier names what it lacks)", f.Intel.SigningChain, err)
	}
	write("tcb_certs.pem")
	write("vlek.pem")
	f, err := ReadFolder(dir)
	if c := f.Intel; err != nil || string(c.TCBInfo) != "tcb_info_v3.json" || string(c.SigningChain) != "tcb_certs.pem" || string(f.VLEK) != "vlek.pem" || f.VCEK != nil {
		t.Errorf("collateral %q %q, VLEK %q: %v", c.TCBInfo, c.SigningChain, f.VLEK, err)
	}
	write("tcb_info_old.json")
	if _, err := ReadFolder(dir); err == nil || !strings.Contains(err.Error(), "2 files match tcb_info*.json") {
		t.Errorf("two TCB infos: %v", err)
	}
}

func TestEvidenceTypes(t *testing.T) {
	if _, err := Evidence(attest.Evidence{Type: "sev", Raw: []byte("x")}, Options{}); attest.CheckOf(err) != attest.CheckType {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := Evidence(attest.Evidence{Type: attest.Sim}, Options{}); attest.CheckOf(err) != attest.CheckFormat {
		t.Errorf("empty evidence: %v", err)
	}
	// A known type spelled otherwise gave no claims and no error.
	for _, typ := range []attest.Type{"SIM", "sgx ", "Nitro"} {
		if c, err := Evidence(attest.Evidence{Type: typ, Raw: []byte("x")}, Options{}); c != nil || attest.CheckOf(err) != attest.CheckType {
			t.Errorf("type %q: %v %v", typ, c, err)
		}
	}
}

// A collateral folder without a VCEK (one kept for SGX and TDX, say)
// leaves SEV-SNP evidence to the VCEK its certificate table carries.
func TestSNPTableBesideCollateral(t *testing.T) {
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	report, err := s.Report([]byte("rd"))
	if err != nil {
		t.Fatal(err)
	}
	table, err := s.CertTable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Evidence(attest.Evidence{Type: attest.SNP, Raw: append(report, table...)}, Options{CollateralDir: t.TempDir(), TestRoots: s.Roots()})
	if err != nil || !c.TestRoot {
		t.Errorf("%+v %v", c, err)
	}
}
