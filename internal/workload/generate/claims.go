package generate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/base/tee"
)

// The DeviceClasses the operator's chart ships for the DRA drivers.
const (
	ClassSGXEnclave   = "sgx-enclave.cloister.dev"
	ClassSGXProvision = "sgx-provision.cloister.dev"
	ClassNitroEnclave = "nitro-enclave.cloister.dev"
)

// ClassCEX is the DeviceClass of a CryptoExpress mode's queues, or of a
// config set's (the CEXPlugin's release ships it; "set-" keeps a set
// named like a mode apart from the mode's class).
func ClassCEX(mode, set string) string {
	if set != "" {
		return "cex-set-" + set + ".cloister.dev"
	}
	return "cex-" + mode + ".cloister.dev"
}

// deviceRequest is what one container's device limits become: a request
// of a claim.
type deviceRequest struct {
	// family is sgx, cex or nitro: each has a claim of its own.
	family, name string
	exact        resourceapi.ExactDeviceRequest
}

// devicesOf reads a container's device limits as DRA requests, and the
// limits they replace. An error names what has no DRA form.
func devicesOf(c *corev1.Container) ([]deviceRequest, []corev1.ResourceName, error) {
	var reqs []deviceRequest
	var used []corev1.ResourceName
	limit := func(name corev1.ResourceName) (int64, bool) {
		q, ok := c.Resources.Limits[name]
		if ok {
			used = append(used, name)
		}
		return q.Value(), ok
	}
	if n, ok := limit(tee.SGXEnclave); ok && n > 0 {
		r := deviceRequest{family: "sgx", name: "sgx-enclave", exact: resourceapi.ExactDeviceRequest{DeviceClassName: ClassSGXEnclave}}
		if epc, ok := c.Resources.Limits[tee.SGXEPC]; ok {
			used = append(used, tee.SGXEPC)
			r.exact.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"epc": epc}}
		}
		reqs = append(reqs, r)
	} else if _, ok := c.Resources.Limits[tee.SGXEPC]; ok {
		return nil, nil, fmt.Errorf("container %s: limits %s without %s: EPC is the enclave device's capacity under DRA", c.Name, tee.SGXEPC, tee.SGXEnclave)
	}
	if n, ok := limit(tee.SGXProvision); ok && n > 0 {
		reqs = append(reqs, deviceRequest{family: "sgx", name: "sgx-provision", exact: resourceapi.ExactDeviceRequest{DeviceClassName: ClassSGXProvision}})
	}
	if n, ok := limit(tee.NitroEnclaves); ok && n > 0 {
		r := deviceRequest{family: "nitro", name: "nitro-enclave", exact: resourceapi.ExactDeviceRequest{DeviceClassName: ClassNitroEnclave, Count: n}}
		if cpus, ok := c.Resources.Limits[tee.NitroCPUs]; ok {
			used = append(used, tee.NitroCPUs)
			if n != 1 {
				return nil, nil, fmt.Errorf("container %s: %d Nitro enclaves with their CPUs: a claim gives one enclave its CPUs; ask for one enclave per container", c.Name, n)
			}
			r.exact.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"cpus": cpus}}
		}
		reqs = append(reqs, r)
	} else if _, ok := c.Resources.Limits[tee.NitroCPUs]; ok {
		return nil, nil, fmt.Errorf("container %s: limits %s without %s: the CPUs are the enclave device's capacity under DRA", c.Name, tee.NitroCPUs, tee.NitroEnclaves)
	}
	for _, name := range slices.Sorted(func(yield func(corev1.ResourceName) bool) {
		for n := range c.Resources.Limits {
			if !yield(n) {
				return
			}
		}
	}) {
		rest, ok := strings.CutPrefix(string(name), tee.CEXPrefix)
		if !ok {
			continue
		}
		mode, set, _ := strings.Cut(rest, "-")
		n, _ := limit(name)
		if n < 1 {
			continue
		}
		r := deviceRequest{family: "cex", name: "cex-" + rest, exact: resourceapi.ExactDeviceRequest{DeviceClassName: ClassCEX(mode, set), Count: n}}
		if set != "" {
			r.exact.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["%s"].mode == %q`, tee.CEXDRADriver, mode)}}}
		}
		reqs = append(reqs, r)
	}
	return reqs, used, nil
}

// claimTemplates turns the device limits of every pod template of docs
// into claims: a ResourceClaimTemplate per container and device family,
// named <workload>-<container>-<family> in the workload's namespace,
// appended to the stream; the pod gets it in spec.resourceClaims
// (<container>-<family>), the container in resources.claims, and the
// limits go. Pods without device limits stay as they are; a pod claimed
// before keeps its claims.
func claimTemplates(docs []*kyaml.Node) ([]*kyaml.Node, error) {
	var added []*kyaml.Node
	for i, doc := range docs {
		d := kyaml.NewRNode(doc)
		if d.YNode().Kind != kyaml.MappingNode {
			continue
		}
		path, ok := podPaths[d.GetKind()]
		if !ok {
			continue
		}
		tmpl, err := d.Pipe(kyaml.Lookup(path...))
		if err != nil || tmpl == nil {
			continue
		}
		spec := tmpl.Field("spec")
		if spec == nil {
			continue
		}
		var pod corev1.PodSpec
		if err := decodeNode(spec.Value, &pod); err != nil {
			return nil, fmt.Errorf("document %d: pod spec: %w", i+1, err)
		}
		ns := d.GetNamespace()
		changed := false
		for j := range pod.Containers {
			c := &pod.Containers[j]
			reqs, used, err := devicesOf(c)
			if err != nil {
				return nil, fmt.Errorf("document %d: %s %s: %w", i+1, d.GetKind(), d.GetName(), err)
			}
			for _, family := range []string{"sgx", "cex", "nitro"} {
				var mine []deviceRequest
				for _, r := range reqs {
					if r.family == family {
						mine = append(mine, r)
					}
				}
				claim := c.Name + "-" + family
				if len(mine) == 0 {
					continue
				}
				if slices.ContainsFunc(pod.ResourceClaims, func(rc corev1.PodResourceClaim) bool { return rc.Name == claim }) {
					changed = true // claimed before: the limits go
					continue
				}
				name := d.GetName() + "-" + claim
				if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
					return nil, fmt.Errorf("document %d: claim template %q: %s", i+1, name, strings.Join(errs, "; "))
				}
				node, err := claimTemplate(name, ns, mine)
				if err != nil {
					return nil, err
				}
				added = append(added, node.YNode())
				pod.ResourceClaims = append(pod.ResourceClaims, corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: &name})
				c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: claim})
				changed = true
			}
			if changed {
				for _, n := range used {
					delete(c.Resources.Limits, n)
					delete(c.Resources.Requests, n)
				}
			}
		}
		if changed {
			if err := setNode(spec.Value, pod); err != nil {
				return nil, err
			}
		}
	}
	return append(docs, added...), nil
}

// claimTemplate is the ResourceClaimTemplate document of reqs, with no
// field but those set.
func claimTemplate(name, namespace string, reqs []deviceRequest) (*kyaml.RNode, error) {
	var requests []any
	for _, r := range reqs {
		exact, err := json.Marshal(r.exact)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(exact, &m); err != nil {
			return nil, err
		}
		requests = append(requests, map[string]any{"name": r.name, "exactly": m})
	}
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	raw, err := sigsyaml.Marshal(map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta,
		"spec": map[string]any{"spec": map[string]any{"devices": map[string]any{"requests": requests}}},
	})
	if err != nil {
		return nil, err
	}
	return kyaml.Parse(string(raw))
}

// claimsOf is claimTemplates over a YAML stream.
func claimsOf(in []byte) ([]byte, error) {
	docs, err := decodeDocs(in)
	if err != nil {
		return nil, err
	}
	if docs, err = claimTemplates(docs); err != nil {
		return nil, err
	}
	return encodeDocs(docs)
}
