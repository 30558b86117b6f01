package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/attest/refvalues/fwtest"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
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

// compute --platform sgx reads a SIGSTRUCT another tool made (Fortanix's,
// published by oasis-core), from a file and from an image by digest, and
// prints its identity, which a CAS policy takes as it is; a changed
// SIGSTRUCT is refused.
func TestReferenceValuesSGX(t *testing.T) {
	raw := attesttest.Read(t, "sgx-sigstruct/sig1.sigstruct.bin")
	dir := t.TempDir()
	sig := writeFile(t, dir, "app.sig", string(raw))
	out, stderr, err := run(t, "reference-values", "compute", "--platform", "sgx", "--sigstruct", sig)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	file, err := refvalues.Parse([]byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if file.SGX.MRENCLAVE.String() != "c50673624a6cb17c1c6c2a4e6906f47a170c4629b8723781d1017ef376f1a75d" ||
		file.Source.Sigstruct != refvalues.Digest(raw) || file.SGX.ISVProdID != 0 {
		t.Errorf("values:\n%s", out)
	}
	// The signer's mask leaves DEBUG out; the printed mask pins it.
	if file.SGX.AttributesMask[0]&0x02 == 0 || file.SGX.Attributes[0]&0x02 != 0 {
		t.Errorf("attributes %s mask %s: DEBUG not pinned clear", file.SGX.Attributes, file.SGX.AttributesMask)
	}
	// The commented identity is a policy CAS parses.
	var policy strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "#   "); ok {
			policy.WriteString(rest + "\n")
		}
	}
	p, err := attest.ParsePolicy([]byte(policy.String()))
	if err != nil || len(p.Identities) != 1 || p.Identities[0].MRSIGNER.String() != file.SGX.MRSIGNER.String() || *p.Identities[0].ISVProdID != 0 {
		t.Fatalf("policy %v:\n%s", err, policy.String())
	}
	// What the enclave reports meets it; the same enclave in debug mode,
	// or another enclave, does not.
	claims := &attest.Claims{Type: attest.SGX, TCBStatus: attest.TCBUpToDate, SGX: &attest.SGXIdentity{
		MRENCLAVE: file.SGX.MRENCLAVE, MRSIGNER: file.SGX.MRSIGNER, Attributes: file.SGX.Attributes}}
	if err := p.Check(claims); err != nil {
		t.Errorf("the enclave itself: %v", err)
	}
	debugAttrs := append(attest.Bytes(nil), file.SGX.Attributes...)
	debugAttrs[0] |= 0x02
	claims.SGX.Attributes = debugAttrs
	if err := (&attest.Policy{AllowDebug: true, Identities: p.Identities}).Check(claims); err == nil || !strings.Contains(err.Error(), "ATTRIBUTES are") {
		t.Errorf("in debug mode: %v", err)
	}

	// From an image, by digest.
	host := testenv.Registry(t, nil)
	ref := testenv.PushFiles(t, host, "enclave", map[string][]byte{"app/app.sig": raw, "app/other": []byte("x")})
	out2, stderr, err := run(t, "reference-values", "compute", "--platform", "sgx", "--image", ref.String(), "--sigstruct", "/app/app.sig")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	file2, err := refvalues.Parse([]byte(out2))
	if err != nil || file2.SGX.MRENCLAVE.String() != file.SGX.MRENCLAVE.String() || file2.Source.Image != ref.String() {
		t.Errorf("from the image: %v\n%s", err, out2)
	}

	bad := append([]byte(nil), raw...)
	bad[1026]++ // ISVSVN
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"tampered":   {[]string{"--sigstruct", writeFile(t, dir, "bad.sig", string(bad))}, "SIGNATURE does not verify"},
		"too large":  {[]string{"--sigstruct", writeFile(t, dir, "big.sig", string(raw)+"x")}, "more than 1808 bytes"},
		"by tag":     {[]string{"--image", host + "/enclave:v1", "--sigstruct", "/app/app.sig"}, "name it by digest"},
		"not there":  {[]string{"--image", ref.String(), "--sigstruct", "/app/missing.sig"}, "has no file /app/missing.sig"},
		"not a sig":  {[]string{"--image", ref.String(), "--sigstruct", "/app/other"}, "1 bytes, a SIGSTRUCT has 1808"},
		"no sigfile": {nil, "--sigstruct: required"},
	} {
		_, _, err := run(t, append([]string{"reference-values", "compute", "--platform", "sgx"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
