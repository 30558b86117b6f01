package snp

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"

	"github.com/cloister-cc/cloister/internal/attest"
)

// vector reads a file of a folder of real evidence in testdata (its
// provenance there).
func vector(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	turinTime = time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC)
	vlekTime  = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
)

// A Turin report verifies with its VCEK, whose AMD extensions
// go-sev-guest v0.15.0 refuses (fmcSPL, an 8-byte hardware id), and its
// TCB is read by Turin's layout.
func TestTurin(t *testing.T) {
	report, vcek := vector(t, "oak-turin-v5", "report.bin"), vector(t, "oak-turin-v5", "vcek.der")
	c, err := Verify(report, Options{At: turinTime, VCEK: vcek})
	if err != nil {
		t.Fatal(err)
	}
	if want := (attest.SNPTCB{FMC: 0, Bootloader: 1, TEE: 0, SNP: 2, Microcode: 71}); c.SNP.TCB != want || c.SNP.Version != 5 {
		t.Errorf("version %d TCB %+v, want 5 and %+v", c.SNP.Version, c.SNP.TCB, want)
	}
	cert, err := parseCert(vcek)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := parseKDSExtensions(cert)
	if err != nil || len(exts.HWID) != turinHWIDSize || exts.ProductName != "Turin" {
		t.Fatalf("%+v %v", exts, err)
	}
	if _, ok := exts.SPL[splFMC]; !ok {
		t.Error("no fmcSPL read")
	}
	// Genoa's VCEK for a Turin report: the product lines differ.
	genoa := vector(t, "oak-genoa-v5", "vcek.der")
	if _, err := Verify(report, Options{At: turinTime, VCEK: genoa}); attest.CheckOf(err) != attest.CheckChain || !strings.Contains(err.Error(), "the report is from a Turin chip") {
		t.Errorf("a Genoa VCEK for a Turin report: %v", err)
	}
}

// A Genoa chip's VCEK does not vouch for another Genoa chip's report.
func TestAnotherChipsVCEK(t *testing.T) {
	report := vector(t, "oak-genoa-v5", "report.bin")
	other := vector(t, "routex-genoa-v5", "vcek.der")
	_, err := Verify(report, Options{At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), VCEK: other})
	if attest.CheckOf(err) != attest.CheckChain || !strings.Contains(err.Error(), "VCEK") {
		t.Errorf("another chip's VCEK: %v, want a chain rejection", err)
	}
	t.Log(err)
}

// AWS's VLEK-signed report v5 (guest policy bit 25, SEV-SNP ABI 1.58)
// verifies with the VLEK as a file or in the certificate table alike,
// its policy flags are claims a policy can require or forbid, and it is
// refused once the VLEK expired.
func TestVLEK(t *testing.T) {
	report, vlek := vector(t, "verdifax-vlek-v5", "report.bin"), vector(t, "verdifax-vlek-v5", "vlek.pem")
	table := abi.CertsFromProto(&spb.CertificateChain{VlekCert: pemOrDER(vlek)}).Marshal()
	for name, tc := range map[string]struct {
		raw  []byte
		opts Options
	}{
		"as a file":                   {report, Options{At: vlekTime, VLEK: vlek}},
		"in the certificate table":    {append(report, table...), Options{At: vlekTime}},
		"a file beside a table entry": {append(report, table...), Options{At: vlekTime, VLEK: vlek}},
	} {
		c, err := Verify(tc.raw, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.SNP.Version != 5 || c.SNP.GuestPolicy != 0x2030000 || strings.Join(c.SNP.PolicyFlags, ",") != "smt,pageSwapDisable" {
			t.Errorf("%s: version %d policy %#x %v", name, c.SNP.Version, c.SNP.GuestPolicy, c.SNP.PolicyFlags)
		}
		id := attest.Identity{Type: attest.SNP, Measurement: c.SNP.Measurement, RequirePolicyFlags: []string{"pageSwapDisable"}, ForbidPolicyFlags: []string{"migrateMA", "debug"}}
		if err := (&attest.Policy{Identities: []attest.Identity{id}}).Check(c); err != nil {
			t.Errorf("%s: requiring pageSwapDisable: %v", name, err)
		}
		id.RequirePolicyFlags = []string{"ciphertextHidingDRAM"}
		if err := (&attest.Policy{Identities: []attest.Identity{id}}).Check(c); attest.CheckOf(err) != attest.CheckIdentity || !strings.Contains(err.Error(), "lacks ciphertextHidingDRAM") {
			t.Errorf("%s: requiring ciphertextHidingDRAM: %v", name, err)
		}
		id.RequirePolicyFlags, id.ForbidPolicyFlags = nil, []string{"smt"}
		if err := (&attest.Policy{Identities: []attest.Identity{id}}).Check(c); attest.CheckOf(err) != attest.CheckIdentity || !strings.Contains(err.Error(), "sets smt") {
			t.Errorf("%s: forbidding smt: %v", name, err)
		}
	}
	if _, err := Verify(report, Options{At: time.Date(2027, 3, 9, 19, 30, 6, 0, time.UTC), VLEK: vlek}); attest.CheckOf(err) != attest.CheckValidity {
		t.Errorf("after the VLEK expired: %v", err)
	}
	if _, err := Verify(report, Options{At: vlekTime}); attest.CheckOf(err) != attest.CheckCollateral || !strings.Contains(err.Error(), "*vlek*") {
		t.Errorf("no VLEK: %v", err)
	}
	// A VCEK given for a VLEK-signed report is not taken for its VLEK.
	if _, err := Verify(report, Options{At: vlekTime, VCEK: vector(t, "oak-genoa-v5", "vcek.der")}); attest.CheckOf(err) != attest.CheckCollateral {
		t.Errorf("a VCEK for a VLEK-signed report: %v", err)
	}
}

func parseCert(der []byte) (*x509.Certificate, error) { return x509.ParseCertificate(pemOrDER(der)) }

// The AMD extensions of a VCEK are read strictly where known and left
// alone where not.
func FuzzKDSExtensions(f *testing.F) {
	f.Add([]byte{0x02, 0x01, 0x07}, []byte{0x16, 0x05, 'T', 'u', 'r', 'i', 'n'}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, spl, name, hwid []byte) {
		cert := &x509.Certificate{Extensions: []pkix.Extension{
			{Id: append(append(asn1.ObjectIdentifier{}, kdsArc...), 3, 9), Value: spl},
			{Id: append(append(asn1.ObjectIdentifier{}, kdsArc...), 2), Value: name},
			{Id: append(append(asn1.ObjectIdentifier{}, kdsArc...), 4), Value: hwid},
			{Id: append(append(asn1.ObjectIdentifier{}, kdsArc...), 7, 7), Value: spl},
		}}
		exts, err := parseKDSExtensions(cert)
		if err == nil && len(exts.HWID) != turinHWIDSize && len(exts.HWID) != abi.ChipIDSize {
			t.Fatalf("took a hardware id of %d bytes", len(exts.HWID))
		}
	})
}
