package generate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/base/tee"
)

const devicePods = `apiVersion: apps/v1
kind: Deployment
metadata: {name: hsm, namespace: pay}
spec:
  selector: {matchLabels: {app: hsm}}
  template:
    metadata: {labels: {app: hsm}}
    spec:
      containers:
      - name: signer
        image: registry.invalid/signer:1
        resources:
          limits: {ibm.com/cex-ep11-ledger: "1", memory: 64Mi}
---
apiVersion: v1
kind: Pod
metadata: {name: enclave}
spec:
  containers:
  - name: parent
    image: registry.invalid/parent:1
    resources:
      limits: {aws.ec2.nitro/nitro_enclaves: "1", aws.ec2.nitro/nitro_enclaves_cpus: "2"}
  - name: sgx
    image: registry.invalid/sgx:1
    resources:
      limits: {sgx.cloister.dev/enclave: "1", sgx.cloister.dev/epc: 512Mi, sgx.cloister.dev/provision: "1"}
  - name: plain
    image: registry.invalid/plain:1
`

// Device limits become a ResourceClaimTemplate per container and family,
// of the chart's DeviceClasses (a CEX config set's with the mode as a
// selector, EPC and the enclave CPUs as capacity), claimed by the pod and
// its container; other limits and containers stay; running it again
// changes nothing.
func TestClaimTemplates(t *testing.T) {
	out, err := claimsOf([]byte(devicePods))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 5 {
		t.Fatalf("%d documents, want the 2 workloads and 3 claim templates:\n%s", len(docs), out)
	}
	var dep struct {
		Spec struct {
			Template struct{ Spec corev1.PodSpec }
		}
	}
	if err := sigsyaml.Unmarshal([]byte(docs[0]), &dep); err != nil {
		t.Fatal(err)
	}
	signer := dep.Spec.Template.Spec.Containers[0]
	if _, ok := signer.Resources.Limits["ibm.com/cex-ep11-ledger"]; ok || signer.Resources.Limits.Memory().String() != "64Mi" ||
		len(signer.Resources.Claims) != 1 || signer.Resources.Claims[0].Name != "signer-cex" {
		t.Errorf("signer: %+v", signer.Resources)
	}
	if rc := dep.Spec.Template.Spec.ResourceClaims; len(rc) != 1 || *rc[0].ResourceClaimTemplateName != "hsm-signer-cex" {
		t.Errorf("the Deployment's claims: %+v", rc)
	}
	var pod corev1.Pod
	if err := sigsyaml.Unmarshal([]byte(docs[1]), &pod); err != nil {
		t.Fatal(err)
	}
	if n := len(pod.Spec.ResourceClaims); n != 2 || len(pod.Spec.Containers[2].Resources.Claims) != 0 || len(pod.Spec.Containers[1].Resources.Limits) != 0 {
		t.Errorf("the pod: %+v", pod.Spec)
	}
	templates := map[string]resourceapi.ResourceClaimTemplate{}
	for _, d := range docs[2:] {
		var tmpl resourceapi.ResourceClaimTemplate
		if err := sigsyaml.UnmarshalStrict([]byte(d), &tmpl); err != nil {
			t.Fatalf("%v\n%s", err, d)
		}
		templates[tmpl.Namespace+"/"+tmpl.Name] = tmpl
	}
	cex := templates["pay/hsm-signer-cex"].Spec.Spec.Devices.Requests
	if len(cex) != 1 || cex[0].Exactly.DeviceClassName != "cex-set-ledger.cloister.dev" || cex[0].Exactly.Count != 1 ||
		cex[0].Exactly.Selectors[0].CEL.Expression != `device.attributes["cex.cloister.dev"].mode == "ep11"` {
		t.Errorf("the CEX claim: %+v", cex)
	}
	nitro := templates["/enclave-parent-nitro"].Spec.Spec.Devices.Requests
	if len(nitro) != 1 || nitro[0].Exactly.DeviceClassName != ClassNitroEnclave {
		t.Errorf("the Nitro claim: %+v", nitro)
	} else if cpus := nitro[0].Exactly.Capacity.Requests["cpus"]; cpus.String() != "2" {
		t.Errorf("the Nitro claim's CPUs: %s", cpus.String())
	}
	sgx := templates["/enclave-sgx-sgx"].Spec.Spec.Devices.Requests
	if len(sgx) != 2 || sgx[0].Exactly.DeviceClassName != ClassSGXEnclave || sgx[1].Exactly.DeviceClassName != ClassSGXProvision {
		t.Errorf("the SGX claim: %+v", sgx)
	} else if epc := sgx[0].Exactly.Capacity.Requests["epc"]; epc.String() != "512Mi" {
		t.Errorf("the SGX claim's EPC: %s", epc.String())
	}

	again, err := claimsOf(out)
	if err != nil || string(again) != string(out) {
		t.Errorf("a second run changed the stream (%v):\n%s", err, again)
	}
	for _, tc := range []struct{ limits, want string }{
		{`{sgx.cloister.dev/epc: 1Gi}`, "limits sgx.cloister.dev/epc without sgx.cloister.dev/enclave"},
		{`{aws.ec2.nitro/nitro_enclaves_cpus: "2"}`, "limits aws.ec2.nitro/nitro_enclaves_cpus without aws.ec2.nitro/nitro_enclaves"},
		{`{aws.ec2.nitro/nitro_enclaves: "2", aws.ec2.nitro/nitro_enclaves_cpus: "4"}`, "2 Nitro enclaves with their CPUs"},
	} {
		in := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources:\n      limits: " + tc.limits + "\n"
		if _, err := claimsOf([]byte(in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.limits, err, tc.want)
		}
	}
}

// An SGX pod generated with claims asks for its enclave device and its
// enclave's EPC by a claim, not limits, and a second run changes nothing.
func TestSGXPodByClaims(t *testing.T) {
	opts := sgxOptions()
	opts.ResourceClaims = true
	out, _ := rewrite(t, sgxShop, opts)
	if strings.Contains(out, string(tee.SGXEPC)) || !strings.Contains(out, "kind: ResourceClaimTemplate") {
		t.Fatalf("the SGX pod by claims:\n%s", out)
	}
	var tmpl resourceapi.ResourceClaimTemplate
	docs := strings.Split(out, "\n---\n")
	if err := sigsyaml.UnmarshalStrict([]byte(docs[len(docs)-1]), &tmpl); err != nil {
		t.Fatal(err)
	}
	req := tmpl.Spec.Spec.Devices.Requests
	if epc := req[0].Exactly.Capacity.Requests["epc"]; len(req) != 1 || req[0].Exactly.DeviceClassName != ClassSGXEnclave || epc.Value() != 512<<20 {
		t.Errorf("the enclave's claim: %+v", req)
	}
	if again, _ := rewrite(t, out, opts); again != out {
		t.Errorf("a second run changed:\n%s\nto\n%s", out, again)
	}
}
