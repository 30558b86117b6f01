package generate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// Port forwarding: the kubelet cannot port-forward into a Kata VM
// (kata-containers issue 1693), so a pod template annotated with the
// ports gets a port forwarder, an ordinary pod that relays them to the
// same ports of the Service that selects the confidential pods:
// kubectl port-forward pod/port-forwarder-NAME PORT then reaches them,
// with any TLS passing through end to end.
const (
	PortForwardAnnotation = "cloister.dev/port-forward"
	// ForwarderFor labels a forwarder with its workload's manifest
	// service name, which is how a rerun finds it.
	ForwarderFor    = "cloister.dev/port-forwarder-for"
	ForwarderPrefix = "port-forwarder-"
)

// forwarderMemory bounds a relay of a few connections.
var forwarderMemory = resource.MustParse("32Mi")

// parseForwardPorts reads the annotation: ports joined by commas.
func parseForwardPorts(v string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("annotation %s: %q is not a port (1-65535)", PortForwardAnnotation, f)
		}
		if slices.Contains(out, uint16(n)) {
			return nil, fmt.Errorf("annotation %s: port %d twice", PortForwardAnnotation, n)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// addForwarders writes (or brings up to date) the forwarder of every
// workload that asks for one, and takes out the forwarders of this
// stream's workloads that no longer do.
func addForwarders(ctx context.Context, docs []*kyaml.Node, res *Result, opts Options) ([]*kyaml.Node, error) {
	existing := map[string]int{}
	for i, d := range docs {
		n := kyaml.NewRNode(d)
		if n.YNode().Kind == kyaml.MappingNode && n.GetKind() == "Pod" && n.GetLabels()[ForwarderFor] != "" {
			existing[n.GetLabels()[ForwarderFor]] = i
		}
	}
	drop := map[int]bool{}
	for _, w := range res.Workloads {
		at, had := existing[w.Service]
		if len(w.Forward) == 0 {
			drop[at] = had
			continue
		}
		node, err := forwarder(ctx, w, res.Services, opts)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
		}
		if had {
			merge(docs[at], node)
		} else {
			docs = append(docs, node)
		}
	}
	var out []*kyaml.Node
	for i, d := range docs {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

// forwarder is the forwarder Pod of w, relaying to the Service that
// selects it.
func forwarder(ctx context.Context, w Workload, services []Service, opts Options) (*kyaml.Node, error) {
	var target string
	for _, s := range services {
		if s.Namespace == w.Namespace && len(s.Selector) > 0 && selects(s.Selector, w.Labels) {
			target = s.Name + "." + s.Namespace + ".svc"
			break
		}
	}
	if target == "" {
		return nil, fmt.Errorf("annotation %s: no Service of the YAML selects the pods, and the forwarder relays to one", PortForwardAnnotation)
	}
	if opts.MeshImage == "" {
		return nil, ErrNoMeshImage
	}
	image := opts.MeshImage
	if opts.Resolver != nil && !podpolicy.Pinned(image) {
		var err error
		if image, err = opts.Resolver.Resolve(ctx, image); err != nil {
			return nil, fmt.Errorf("the port forwarder's image: %w", err)
		}
	}
	name := ForwarderPrefix + w.Name
	if len(name) > 63 {
		return nil, fmt.Errorf("annotation %s: the forwarder's name %q is longer than 63 characters", PortForwardAnnotation, name)
	}
	args := []string{"forward", "--to", target}
	var ports []corev1.ContainerPort
	low := false
	for _, p := range w.Forward {
		args = append(args, "--port", strconv.Itoa(int(p)))
		ports = append(ports, corev1.ContainerPort{ContainerPort: int32(p), Protocol: corev1.ProtocolTCP})
		low = low || p < 1024
	}
	yes, no := true, false
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	if low {
		caps.Add = []corev1.Capability{"NET_BIND_SERVICE"}
	}
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "port-forwarder", ForwarderFor: w.Service}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "port-forwarder", Image: image, Args: args, Ports: ports,
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: forwarderMemory}, Requests: corev1.ResourceList{corev1.ResourceMemory: forwarderMemory}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes, Capabilities: caps},
			}},
		},
	}
	raw, err := sigsyaml.Marshal(pod)
	if err != nil {
		return nil, err
	}
	n, err := kyaml.Parse(string(raw))
	if err != nil {
		return nil, err
	}
	// The API server's fields, empty here, stay out of the YAML.
	_ = n.PipeE(kyaml.Clear("status"))
	_ = n.PipeE(kyaml.Lookup("metadata"), kyaml.Clear("creationTimestamp"))
	return n.YNode(), nil
}
