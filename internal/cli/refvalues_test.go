package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/attest/refvalues/fwtest"
	workloadmanifest "github.com/cloister-cc/cloister/internal/workload/manifest"
)

// compute writes the values of the guest's artifacts; generate takes the
// file for --reference-values and puts the measurement into every
// workload's identity.
func TestReferenceValuesComputeIntoGenerate(t *testing.T) {
	dir := t.TempDir()
	fw := writeFile(t, dir, "OVMF.fd", string(fwtest.OVMF(8, []fwtest.SEVSection{
		{GPA: 0x800000, Size: 4096, Type: 1}, {GPA: 0x801000, Size: 4096, Type: 2}, {GPA: 0x802000, Size: 4096, Type: 3},
		{GPA: 0x80f000, Size: 4096, Type: 0x10}}, 0x80b004, 0x80fc00)))
	kernel := writeFile(t, dir, "vmlinuz", "a kernel")
	out, stderr, err := run(t, "reference-values", "compute", "--platform", "snp", "--firmware", fw, "--kernel", kernel,
		"--cmdline", "console=hvc0", "--vcpus", "2", "--vcpu-type", "EPYC-Milan", "--min-tcb", "3,0,8,115")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	file, err := refvalues.Parse([]byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	data, _ := os.ReadFile(fw)
	kdata, _ := os.ReadFile(kernel)
	want, err := refvalues.SNPLaunchDigest(refvalues.SNPInput{Firmware: data, Kernel: kdata, Initrd: []byte{}, Cmdline: "console=hvc0", VCPUs: 2, VCPUType: "EPYC-Milan"})
	if err != nil {
		t.Fatal(err)
	}
	if file.Version != refvalues.Version || file.SNP.Measurement.String() != attest.Bytes(want).String() || *file.SNP.GuestPolicy != 0x30000 ||
		file.SNP.MinTCB.Microcode != 115 || file.Source.Kernel != refvalues.Digest(kdata) || file.Source.Cmdline != "console=hvc0" {
		t.Errorf("values:\n%s", out)
	}
	values := writeFile(t, dir, "snp-values.yaml", out)

	host := registryWith(t, "web", "initializer")
	resources := writeFile(t, t.TempDir(), "shop.yaml", strings.ReplaceAll(shopYAML, "REGISTRY", host))
	identity := writeFile(t, dir, "cas.yaml", "identities: [{type: snp, measurement: "+strings.Repeat("cd", 48)+", hostData: "+strings.Repeat("ca", 32)+"}]\n")
	work := t.TempDir()
	if _, stderr, err := run(t, "generate", "--reference-values", values, "--cas-identity", identity, "--workspace", work,
		"--initializer-image", host+"/initializer:v1", resources); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	w, err := workloadmanifest.Open(work)
	if err != nil {
		t.Fatal(err)
	}
	doc := w.Doc
	id := doc.Service("shop-deployment-web").Attestation.Identities[0]
	if id.Type != attest.SNP || id.Measurement.String() != attest.Bytes(want).String() || id.GuestPolicy == nil || *id.GuestPolicy != 0x30000 || id.MinTCB.SNP != 8 || doc.AllowSimulation {
		t.Errorf("identity %+v", id)
	}

	// A bare platform name still needs its values; a file of the other
	// platform's is refused.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--reference-values", "snp"}, "snp.measurement"},
		{[]string{"--reference-values", "tdx", "--reference-values-file", values}, "snp values for platform tdx"},
		{[]string{"--reference-values", filepath.Join(dir, "missing.yaml")}, "or a reference values file"},
	} {
		args := append([]string{"generate", "--cas-identity", identity, "--workspace", t.TempDir(), "--initializer-image", host + "/initializer:v1", resources}, tc.args...)
		if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}

	tdvf := writeFile(t, dir, "TDVF.fd", string(fwtest.TDVF(4, []fwtest.TDVFSection{{DataOffset: 4096, RawDataSize: 4096, MemoryAddress: 0xfffc0000, MemoryDataSize: 4096, Attributes: 1}})))
	out, _, err = run(t, "reference-values", "compute", "--platform", "tdx", "--firmware", tdvf, "--rtmr", ","+strings.Repeat("ab", 48))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := refvalues.Parse([]byte(out)); err != nil || len(f.TDX.MRTD) != 48 || len(f.TDX.RTMR) != 2 || len(f.TDX.RTMR[0]) != 0 {
		t.Errorf("tdx values %v:\n%s", err, out)
	}
}
