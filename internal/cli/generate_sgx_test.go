package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/generate"
)

const sgxYAML = `apiVersion: v1
kind: Pod
metadata: {name: api, namespace: shop, annotations: {sgx.cloister.dev/enclave-size: 1G}}
spec:
  runtimeClassName: cloister-cc
  containers:
  - {name: api, image: registry.example/api@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb}
`

// The SGX path through the CLI: generate writes what the enclave's
// Gramine manifest needs, the signed enclave's SIGSTRUCT gives its
// values, and generate again pins the enclave in the CAS manifest.
func TestGenerateSGX(t *testing.T) {
	dir, ws := t.TempDir(), t.TempDir()
	pod := writeFile(t, dir, "pod.yaml", sgxYAML)
	casID := writeFile(t, dir, "cas.yaml", "identities: [{type: sgx, mrenclave: '"+strings.Repeat("ca", 32)+"'}]\n")
	base := []string{"generate", "--workspace", ws, "--offline", "--cas-identity", casID,
		"--initializer-image", "registry.example/initializer@sha256:" + strings.Repeat("a", 64)}
	_, stderr, err := run(t, append(base, "--reference-values", "sgx", pod)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines, err := os.ReadFile(filepath.Join(ws, generate.GramineFile("shop-pod-api")))
	if err != nil || !strings.Contains(string(lines), `sgx.enclave_size = "1G"`) || !strings.Contains(string(lines), "COPY --from=registry.example/initializer@sha256:aaaa") {
		t.Fatalf("%v\n%s", err, lines)
	}
	if !strings.Contains(stderr, "no CAS manifest written") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if explained, _, err := run(t, "generate", "--explain", pod); err != nil || !strings.Contains(explained, "Pod shop/api runs an SGX enclave in container api") {
		t.Errorf("explain: %v\n%s", err, explained)
	}

	sig := writeFile(t, dir, "api.sig", string(attesttest.Read(t, "sgx-sigstruct/sig1.sigstruct.bin")))
	values, stderr, err := run(t, "reference-values", "compute", "--platform", "sgx", "--sigstruct", sig)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	valuesFile := writeFile(t, dir, "api.sgx.yaml", values)
	for _, platform := range [][]string{{"--reference-values", valuesFile}, {"--reference-values", "sgx", "--reference-values-file", valuesFile}} {
		if _, stderr, err = run(t, append(append(base, platform...), pod)...); err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		raw, err := os.ReadFile(filepath.Join(ws, generate.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := policy.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if id := doc.Services[0].Attestation.Identities[0]; id.MRENCLAVE.String() != "c50673624a6cb17c1c6c2a4e6906f47a170c4629b8723781d1017ef376f1a75d" || id.AttributesMask[0]&0x02 == 0 {
			t.Errorf("%v: the manifest's identity %+v", platform, id)
		}
	}

	snpLine := "snp: {measurement: '" + strings.Repeat("ab", 48) + "'}\n"
	snp := writeFile(t, dir, "snp.yaml", snpLine)
	both := writeFile(t, dir, "both.yaml", values+snpLine)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"snp values for sgx":         {[]string{"--reference-values", "sgx", "--reference-values-file", snp}, "snp values for platform sgx"},
		"sgx values for snp":         {[]string{"--reference-values", "snp", "--reference-values-file", valuesFile}, "sgx values for platform snp"},
		"no CAS identity":            {[]string{"--reference-values", "sgx"}, "--cas-identity: required for sgx"},
		"two platforms' values":      {[]string{"--reference-values", both}, "values for sgx and snp: give one platform's"},
		"the enclave's pod for a VM": {[]string{"--reference-values", snp}, "generate it with --reference-values sgx"},
	} {
		args := append(base, tc.args...)
		if name == "no CAS identity" {
			args = []string{"generate", "--workspace", ws, "--offline", "--reference-values", "sgx"}
		}
		if _, _, err := run(t, append(args, pod)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
