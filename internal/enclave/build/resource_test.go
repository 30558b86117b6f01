package build

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

func TestPin(t *testing.T) {
	doc := `# the API's enclave
apiVersion: enclave.cloister.dev/v1beta1
kind: NitroEnclaveDeployment
metadata: {name: api}
spec:
  enclave: {cpus: 4}   # four vCPUs
  userPlugins:
  - name: api
    image: r/api@sha256:` + strings.Repeat("1", 64) + `
`
	pcrs := eif.Measure(&eif.Image{Kernel: []byte("k"), Ramdisks: [][]byte{{1}, {2}}})
	out, err := Pin([]byte(doc), "", pcrs)
	if err != nil {
		t.Fatal(err)
	}
	var ned enclavev1beta1.NitroEnclaveDeployment
	if err := yaml.UnmarshalStrict(out, &ned); err != nil {
		t.Fatal(err)
	}
	p0, p1, p2 := pcrs.Hex()
	if p := ned.Spec.Enclave.PCRs; p == nil || p.PCR0 != p0 || p.PCR1 != p1 || p.PCR2 != p2 || ned.Spec.Enclave.CPUs != 4 {
		t.Errorf("spec.enclave %+v", ned.Spec.Enclave)
	}
	if !strings.Contains(string(out), "# the API's enclave") || !strings.Contains(string(out), "# four vCPUs") {
		t.Errorf("comments lost:\n%s", out)
	}
	// Again with other PCRs: replaced, not added.
	other := eif.Measure(&eif.Image{Kernel: []byte("k2"), Ramdisks: [][]byte{{1}}})
	again, err := Pin(out, "r/api-enclave@sha256:"+strings.Repeat("2", 64), other)
	if err != nil {
		t.Fatal(err)
	}
	o0, _, _ := other.Hex()
	if strings.Count(string(again), "pcr0:") != 1 || !strings.Contains(string(again), o0) || strings.Contains(string(again), p0) ||
		!strings.Contains(string(again), "  image: r/api-enclave@sha256:") {
		t.Errorf("rewritten:\n%s", again)
	}
	if _, err := Pin([]byte("kind: Deployment\n"), "", pcrs); err == nil || !strings.Contains(err.Error(), "not a NitroEnclaveDeployment") {
		t.Errorf("a Deployment: %v", err)
	}
}
