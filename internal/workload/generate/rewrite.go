package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// ErrNoMeshImage: a pod has a service mesh annotation, and no mesh image
// was given.
var ErrNoMeshImage = errors.New("the pod has a service mesh annotation, and no service mesh image is known")

// Resolver pins an image reference to its digest (NAME@sha256:...).
type Resolver interface {
	Resolve(ctx context.Context, image string) (string, error)
}

// ConfigReader reads what a pinned image runs when the pod does not say.
type ConfigReader interface {
	Config(ctx context.Context, image string) (*podpolicy.ImageConfig, error)
}

// maxAnnotations is the API server's limit on a pod's annotations, keys
// and values together (TotalAnnotationSizeLimitB).
const maxAnnotations = 256 << 10

// Options say how pods are rewritten.
type Options struct {
	// RuntimeClass replaces the placeholder: the installed, versioned
	// runtime class.
	RuntimeClass string
	// InitializerImage, pinned; CAS and Policy tell the initializer where
	// to attest and which manifest names its service.
	InitializerImage string
	// MeshImage is the service mesh's (cloister-mesh), injected into pods
	// with a service mesh annotation unless SkipServiceMesh.
	MeshImage       string
	SkipServiceMesh bool
	CAS, Policy     string
	// CASExpect is the attestation policy (JSON) CAS's evidence must
	// meet for the initializer to trust it.
	CASExpect string
	// CASSimKey, for an expectation that allows simulation, is the PEM
	// public key the simulated CAS signs its evidence with.
	CASSimKey string
	// PolicyOwners is the manifest's owners for the initializer to pin
	// (initenv.EnvPolicyOwners), and PolicyOwnerThreshold how many of
	// them sign a change (initenv.EnvPolicyOwnerThreshold; empty for an
	// owner-less manifest).
	PolicyOwners, PolicyOwnerThreshold string
	// GuestEvidence: the pods run in confidential VMs (snp, tdx) and
	// attest with their VM's own evidence, not their node's LAS.
	GuestEvidence bool
	// SGX: the pods run SGX enclaves (Gramine) with the initializer as
	// their premain, under their node's own runtime (sgx.go).
	SGX bool
	// TestRoots is PEM test roots CAS's evidence may chain to
	// (initenv.EnvInsecureTestRoots): insecure, fake confidential VMs only.
	TestRoots string
	// WitnessPolicy (text) and WitnessMaxAge are the cosignatures of
	// CAS's transparency log the initializers require
	// (initenv.EnvWitnessPolicy, EnvWitnessMaxAge); empty: none.
	WitnessPolicy, WitnessMaxAge string
	SkipInitializer              bool
	// FixResources sets memory requests to the limits instead of
	// refusing pods whose requests differ.
	FixResources bool
	// ResourceClaims asks for the pods' TEE devices (SGX, CryptoExpress,
	// Nitro Enclaves) by DRA ResourceClaimTemplates instead of extended
	// resources in limits (claims.go).
	ResourceClaims bool
	// OverheadMiB is the runtime class's fixed pod overhead.
	OverheadMiB int64
	Resolver    Resolver
	// Configs, if set, reads the images' configurations into the policy,
	// so the guest pins the entrypoint, environment and user they give.
	Configs ConfigReader
}

// Result is what one YAML stream held.
type Result struct {
	Workloads []Workload
	// Services of the stream, to give workloads their DNS names.
	Services []Service
}

// Service is a Kubernetes Service: whom it selects, its DNS names.
type Service struct {
	Namespace, Name string
	Selector        map[string]string
	// Addresses are the ones the YAML gives it beyond its cluster name:
	// spec.loadBalancerIP, spec.externalIPs and status.loadBalancer's
	// ingress (as kubectl get -o yaml exports a LoadBalancer's). They go
	// into the manifest, so an address enters a certificate only as the
	// owners sign it (cloister set).
	Addresses []string
}

// Rewrite rewrites every confidential pod template of a multi-document
// YAML stream and returns the new stream. Documents it does not touch
// keep their content and comments.
func Rewrite(ctx context.Context, in []byte, opts Options) ([]byte, *Result, error) {
	if opts.ResourceClaims {
		// Before the pods' policies: they cover the claims, not limits.
		var err error
		if in, err = claimsOf(in); err != nil {
			return nil, nil, err
		}
	}
	docs, res, err := walk(in, func(tmpl *kyaml.RNode, w *Workload) error {
		switch {
		case opts.SGX:
			return rewriteSGXPod(ctx, tmpl, w, opts)
		case enclaveOf(tmpl) != "":
			return fmt.Errorf("an SGX pod (annotation %s) runs its enclave under its node's runtime, not in a VM: generate it with --reference-values sgx, or remove the annotation", EnclaveAnnotation)
		}
		return rewritePod(ctx, tmpl, w, opts)
	})
	if err != nil {
		return nil, nil, err
	}
	if docs, err = addForwarders(ctx, docs, res, opts); err != nil {
		return nil, nil, err
	}
	if opts.ResourceClaims && opts.SGX {
		// The enclave's device and EPC, which the SGX rewrite asked for.
		if docs, err = claimTemplates(docs); err != nil {
			return nil, nil, err
		}
	}
	out, err := encodeDocs(docs)
	if err != nil {
		return nil, nil, err
	}
	return out, res, nil
}

// encodeDocs writes a YAML stream.
func encodeDocs(docs []*kyaml.Node) ([]byte, error) {
	var out bytes.Buffer
	// One encoder for the stream: it separates the documents itself.
	enc := kyaml.NewEncoder(&out)
	for i, doc := range docs {
		if err := enc.Encode(doc); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Inspect reads the confidential workloads of a stream as generate left
// them: their services and the digests of their policy annotations.
func Inspect(in []byte) (*Result, error) {
	_, res, err := walk(in, func(tmpl *kyaml.RNode, w *Workload) error {
		if name := enclaveOf(tmpl); name != "" {
			// The enclave is its identity: nothing of the YAML is measured.
			w.Enclave = &Enclave{Container: name}
			return nil
		}
		a, err := tmpl.Pipe(kyaml.Lookup("metadata", "annotations", podpolicy.Annotation))
		if err != nil || a == nil {
			return fmt.Errorf("no policy annotation %s: run cloister generate", podpolicy.Annotation)
		}
		p, digest, err := podpolicy.FromAnnotation(a.YNode().Value)
		if err != nil {
			return err
		}
		w.Digest, w.Policy = digest, p.Canonical()
		return nil
	})
	return res, err
}

// walk decodes a stream and calls visit for each confidential pod
// template, collecting the workloads and Services.
func walk(in []byte, visit func(tmpl *kyaml.RNode, w *Workload) error) ([]*kyaml.Node, *Result, error) {
	docs, err := decodeDocs(in)
	if err != nil {
		return nil, nil, err
	}
	res := &Result{}
	for i, doc := range docs {
		if err := walkDoc(kyaml.NewRNode(doc), visit, res); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
	}
	return docs, res, nil
}

// decodeDocs reads a YAML stream's documents.
func decodeDocs(in []byte) ([]*kyaml.Node, error) {
	dec := kyaml.NewDecoder(bytes.NewReader(in))
	var docs []*kyaml.Node
	for i := 0; ; i++ {
		var doc kyaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		docs = append(docs, &doc)
	}
}

func walkDoc(doc *kyaml.RNode, visit func(tmpl *kyaml.RNode, w *Workload) error, res *Result) error {
	if doc.YNode().Kind != kyaml.MappingNode {
		return nil
	}
	kind := doc.GetKind()
	namespace := doc.GetNamespace()
	if namespace == "" {
		namespace = "default"
	}
	if kind == "Service" {
		sel, _ := doc.Pipe(kyaml.Lookup("spec", "selector"))
		svc := Service{Namespace: namespace, Name: doc.GetName()}
		if sel != nil {
			if err := decodeNode(sel, &svc.Selector); err != nil {
				return fmt.Errorf("Service %s/%s: spec.selector: %w", namespace, svc.Name, err)
			}
		}
		addrs, err := serviceAddresses(doc)
		if err != nil {
			return fmt.Errorf("Service %s/%s: %w", namespace, svc.Name, err)
		}
		svc.Addresses = addrs
		res.Services = append(res.Services, svc)
		return nil
	}
	path, ok := podPaths[kind]
	if !ok {
		return nil
	}
	tmpl, err := doc.Pipe(kyaml.Lookup(path...))
	if err != nil || tmpl == nil {
		return nil
	}
	spec := tmpl.Field("spec")
	if spec == nil {
		return nil
	}
	rc := spec.Value.Field("runtimeClassName")
	if (rc == nil || !isConfidential(rc.Value.YNode().Value)) && enclaveOf(tmpl) == "" {
		return nil
	}
	w := Workload{Kind: kind, Namespace: namespace, Name: doc.GetName()}
	if w.Service, err = ServiceName(namespace, kind, w.Name); err != nil {
		return err
	}
	// Generate and Inspect both read the id, so CheckManifest compares
	// what generate wrote with what the YAML says now.
	var annotations map[string]string
	if meta := tmpl.Field("metadata"); meta != nil {
		if err := decodeField(meta.Value, "annotations", &annotations); err != nil {
			return fmt.Errorf("%s %s/%s: %w", kind, namespace, w.Name, err)
		}
	}
	if w.SecretID, err = workloadSecretID(annotations); err != nil {
		return fmt.Errorf("%s %s/%s: %w", kind, namespace, w.Name, err)
	}
	if err := visit(tmpl, &w); err != nil {
		return fmt.Errorf("%s %s/%s: %w", kind, namespace, w.Name, err)
	}
	res.Workloads = append(res.Workloads, w)
	return nil
}

// isConfidential says whether a runtime class marks a pod generate owns:
// the placeholder or a class it wrote, so rerunning updates the policy.
func isConfidential(class string) bool {
	return class == Placeholder || strings.HasPrefix(class, Placeholder+"-")
}

// openTemplate is a pod template's metadata (made if missing), spec and
// annotations; it reads the pods' labels into w.
func openTemplate(tmpl *kyaml.RNode, w *Workload) (meta, spec *kyaml.RNode, annotations map[string]string, err error) {
	if meta, err = tmpl.Pipe(kyaml.LookupCreate(kyaml.MappingNode, "metadata")); err != nil {
		return nil, nil, nil, err
	}
	if spec, err = tmpl.Pipe(kyaml.Lookup("spec")); err != nil {
		return nil, nil, nil, err
	}
	if err := decodeField(meta, "annotations", &annotations); err != nil {
		return nil, nil, nil, err
	}
	return meta, spec, annotations, decodeField(meta, "labels", &w.Labels)
}

// rewritePod rewrites one pod template (metadata and spec) in place.
func rewritePod(ctx context.Context, tmpl *kyaml.RNode, w *Workload, opts Options) error {
	meta, spec, annotations, err := openTemplate(tmpl, w)
	if err != nil {
		return err
	}
	if v, ok := annotations[PortForwardAnnotation]; ok {
		if w.Forward, err = parseForwardPorts(v); err != nil {
			return err
		}
	}
	mesh, hasMesh, err := annotation.FromAnnotations(annotations)
	if err != nil {
		return err
	}
	hasMesh = hasMesh && !opts.SkipServiceMesh

	var pod corev1.PodSpec
	if err := decodeNode(spec, &pod); err != nil {
		return fmt.Errorf("pod spec: %w", err)
	}
	pod.RuntimeClassName = &opts.RuntimeClass
	if opts.SkipInitializer || annotations[SkipInitializerAnnotation] == "true" {
		if hasMesh {
			return errMeshWithoutInitializer
		}
	} else {
		injectInitializer(&pod, w.Service, opts)
	}
	if hasMesh && opts.MeshImage == "" {
		return ErrNoMeshImage
	}
	if err := injectMesh(&pod, mesh, hasMesh, opts.MeshImage); err != nil {
		return err
	}
	if err := pinImages(ctx, &pod, opts.Resolver); err != nil {
		return err
	}
	var warnings []string
	if w.MemoryMiB, warnings, err = checkResources(&pod, annotations, opts); err != nil {
		return err
	}

	policy, err := podpolicy.Of(&pod, annotations)
	if err != nil {
		return err
	}
	warnings = append(warnings, imageConfigs(ctx, policy, opts.Configs)...)
	w.Warnings = append(warnings, policy.Warnings()...)
	value, digest := policy.AnnotationValue()
	w.Digest, w.Policy = digest, policy.Canonical()
	size := len(podpolicy.Annotation) + len(value)
	for k, v := range annotations {
		if k != podpolicy.Annotation {
			size += len(k) + len(v)
		}
	}
	if size > maxAnnotations {
		return fmt.Errorf("the pod's annotations would be %d bytes with its policy (%d bytes in %s), more than the %d the API server takes: make the pod smaller (fewer containers, arguments or environment variables)",
			size, len(value), podpolicy.Annotation, maxAnnotations)
	}

	if err := setNode(spec, pod); err != nil {
		return err
	}
	return meta.PipeE(kyaml.LookupCreate(kyaml.MappingNode, "annotations"), kyaml.SetField(podpolicy.Annotation, kyaml.NewStringRNode(value)))
}

// imageConfigs puts each container's image configuration into the
// policy, and names the containers whose configuration is unknown: for
// them the guest cannot pin what the image decides.
func imageConfigs(ctx context.Context, p *podpolicy.Policy, r ConfigReader) []string {
	if r == nil {
		return nil
	}
	var warnings []string
	for _, set := range [][]podpolicy.Container{p.InitContainers, p.Containers} {
		for i := range set {
			c := &set[i]
			cfg, err := r.Config(ctx, c.Image)
			if err == nil {
				c.ImageConfig = cfg
				continue
			}
			what := "its PATH, folder and user"
			if len(c.Command) == 0 {
				what = "its entrypoint, PATH, folder and user"
			}
			warnings = append(warnings, fmt.Sprintf("container %s: %v, so the guest does not pin %s as its image gives them; run generate where it reaches the registry once", c.Name, err, what))
		}
	}
	return warnings
}

// injectInitializer makes the initializer the first init container (or
// brings the one there up to date) and mounts the secrets volume, in
// memory, into every app container.
func injectInitializer(pod *corev1.PodSpec, service string, opts Options) {
	c := corev1.Container{
		Name:  InitializerName,
		Image: opts.InitializerImage,
		Env: []corev1.EnvVar{
			// Its node's LAS first: $(CLOISTER_NODE_IP) expands only after its definition.
			laswire.PodEnv()[0], laswire.PodEnv()[1],
			{Name: initenv.EnvCAS, Value: opts.CAS},
			{Name: initenv.EnvExpect, Value: opts.CASExpect},
			{Name: initenv.EnvPolicy, Value: opts.Policy},
			{Name: initenv.EnvService, Value: service},
			{Name: initenv.EnvPolicyOwners, Value: opts.PolicyOwners},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: SecretsVolume, MountPath: initenv.SecretsPath}},
	}
	if opts.PolicyOwnerThreshold != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: initenv.EnvPolicyOwnerThreshold, Value: opts.PolicyOwnerThreshold})
	}
	if opts.CASSimKey != "" {
		c.Env = slices.Insert(c.Env, 4, corev1.EnvVar{Name: initenv.EnvCASSimKey, Value: opts.CASSimKey})
	}
	if opts.GuestEvidence {
		// In a confidential VM the pod attests with the VM's own
		// evidence: no LAS. The guest's TEE interface (configfs-tsm,
		// /dev/sev-guest, /dev/tdx_guest) is open to privileged containers
		// only; privileged inside a Kata VM reaches the guest's devices,
		// never the host's (the runtime handler sets
		// privileged_without_host_devices).
		c.Env = append(slices.Delete(c.Env, 0, 2), corev1.EnvVar{Name: initenv.EnvEvidence, Value: initenv.EvidenceGuest})
		privileged := true
		c.SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
	}
	if opts.TestRoots != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: initenv.EnvInsecureTestRoots, Value: opts.TestRoots})
	}
	if opts.WitnessPolicy != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: initenv.EnvWitnessPolicy, Value: opts.WitnessPolicy})
		if opts.WitnessMaxAge != "" {
			c.Env = append(c.Env, corev1.EnvVar{Name: initenv.EnvWitnessMaxAge, Value: opts.WitnessMaxAge})
		}
	}
	inits := []corev1.Container{c}
	for _, c := range pod.InitContainers {
		if c.Name != InitializerName {
			inits = append(inits, c)
		}
	}
	pod.InitContainers = inits
	// Every container reads the initializer's files by its group.
	if pod.SecurityContext == nil {
		pod.SecurityContext = &corev1.PodSecurityContext{}
	}
	group := int64(initenv.FilesGroup)
	if pod.SecurityContext.RunAsGroup != nil {
		group = *pod.SecurityContext.RunAsGroup
	}
	if !slices.Contains(pod.SecurityContext.SupplementalGroups, group) {
		pod.SecurityContext.SupplementalGroups = append(pod.SecurityContext.SupplementalGroups, group)
	}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if !hasMount(c, SecretsVolume) {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: SecretsVolume, MountPath: initenv.SecretsPath})
		}
	}
	for _, v := range pod.Volumes {
		if v.Name == SecretsVolume {
			return
		}
	}
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: SecretsVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}})
}

func hasMount(c *corev1.Container, volume string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return true
		}
	}
	return false
}

// pinImages replaces every image by its digest reference.
func pinImages(ctx context.Context, pod *corev1.PodSpec, r Resolver) error {
	pin := func(field string, cs []corev1.Container) error {
		for i := range cs {
			if podpolicy.Pinned(cs[i].Image) {
				continue
			}
			if r == nil {
				return fmt.Errorf("%s[%d] (%s): image %q has no digest", field, i, cs[i].Name, cs[i].Image)
			}
			ref, err := r.Resolve(ctx, cs[i].Image)
			if err != nil {
				return fmt.Errorf("%s[%d] (%s): %w", field, i, cs[i].Name, err)
			}
			cs[i].Image = ref
		}
		return nil
	}
	if err := pin("initContainers", pod.InitContainers); err != nil {
		return err
	}
	return pin("containers", pod.Containers)
}

// decodeField decodes the named field of a mapping node, if present.
func decodeField(n *kyaml.RNode, field string, v any) error {
	f := n.Field(field)
	if f == nil {
		return nil
	}
	return decodeNode(f.Value, v)
}

// decodeNode decodes a node through JSON, as the API server would.
func decodeNode(n *kyaml.RNode, v any) error {
	j, err := n.MarshalJSON()
	if err != nil {
		return err
	}
	return sigsyaml.UnmarshalStrict(j, v)
}

// setNode writes v into n's fields: fields v has are set (keeping the
// order, comments and style of those that stay), fields it lacks are
// removed.
func setNode(n *kyaml.RNode, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// JSON is YAML: parsing it keeps numbers as written.
	want, err := kyaml.Parse(string(j))
	if err != nil {
		return err
	}
	merge(n.YNode(), want.YNode())
	return nil
}

// serviceAddresses reads a Service's external addresses: IPs, and the
// host names a load balancer's ingress names.
func serviceAddresses(doc *kyaml.RNode) ([]string, error) {
	var fields struct {
		Spec struct {
			LoadBalancerIP string   `json:"loadBalancerIP"`
			ExternalIPs    []string `json:"externalIPs"`
		} `json:"spec"`
		Status struct {
			LoadBalancer struct {
				Ingress []struct {
					IP       string `json:"ip"`
					Hostname string `json:"hostname"`
				} `json:"ingress"`
			} `json:"loadBalancer"`
		} `json:"status"`
	}
	raw, err := doc.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	var out []string
	add := func(field, v string, ip bool) error {
		if v == "" {
			return nil
		}
		if ip && net.ParseIP(v) == nil {
			return fmt.Errorf("%s: %q is not an IP address", field, v)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
		return nil
	}
	if err := add("spec.loadBalancerIP", fields.Spec.LoadBalancerIP, true); err != nil {
		return nil, err
	}
	for i, v := range fields.Spec.ExternalIPs {
		if err := add(fmt.Sprintf("spec.externalIPs[%d]", i), v, true); err != nil {
			return nil, err
		}
	}
	for i, in := range fields.Status.LoadBalancer.Ingress {
		if err := add(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), in.IP, true); err != nil {
			return nil, err
		}
		if err := add(fmt.Sprintf("status.loadBalancer.ingress[%d].hostname", i), in.Hostname, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}
