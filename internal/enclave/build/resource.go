package build

import (
	"fmt"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// Pin writes pcrs into a NitroEnclaveDeployment's YAML as
// spec.enclave.pcrs, and podImage (unless empty) as spec.image, leaving
// everything else as it was (comments included): enclave build --update,
// so the resource names the image it was built into and pins its PCRs.
func Pin(doc []byte, podImage string, pcrs eif.PCRs) ([]byte, error) {
	node, err := kyaml.Parse(string(doc))
	if err != nil {
		return nil, fmt.Errorf("reading the resource: %w", err)
	}
	if node.GetKind() != "NitroEnclaveDeployment" {
		return nil, fmt.Errorf("the resource is a %q, not a NitroEnclaveDeployment", node.GetKind())
	}
	target, err := node.Pipe(kyaml.LookupCreate(kyaml.MappingNode, "spec", "enclave", "pcrs"))
	if err != nil {
		return nil, fmt.Errorf("spec.enclave.pcrs: %w", err)
	}
	p0, p1, p2 := pcrs.Hex()
	for field, value := range map[string]string{"pcr0": p0, "pcr1": p1, "pcr2": p2} {
		if err := target.PipeE(kyaml.SetField(field, kyaml.NewStringRNode(value))); err != nil {
			return nil, fmt.Errorf("spec.enclave.pcrs.%s: %w", field, err)
		}
	}
	if podImage != "" {
		if err := node.PipeE(kyaml.Lookup("spec"), kyaml.SetField("image", kyaml.NewStringRNode(podImage))); err != nil {
			return nil, fmt.Errorf("spec.image: %w", err)
		}
	}
	out, err := node.String()
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}
