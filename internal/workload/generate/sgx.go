package generate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// An SGX pod runs under its node's own runtime, its TEE an enclave in
// one of its containers (Gramine), not a VM: no runtime class, no pod
// policy (nothing measures the pod's YAML, the enclave's MRENCLAVE is its
// identity), and no initializer container: the initializer runs inside
// the enclave as its premain, so the secrets never leave it.
const (
	// EnclaveAnnotation names the container whose program is the Gramine
	// enclave (default: the pod's only container). Generate keeps it on
	// the pods it made: it marks them as SGX workloads.
	EnclaveAnnotation = "sgx.cloister.dev/enclave"
	// EnclaveSizeAnnotation is the enclave's size as Gramine's
	// sgx.enclave_size writes it (DefaultEnclaveSize when absent): the
	// container's EPC request.
	EnclaveSizeAnnotation = "sgx.cloister.dev/enclave-size"
	DefaultEnclaveSize    = "256M"
	// aesmVolume is the node's AESM folder in the enclave container,
	// where Gramine asks AESM for its quotes.
	aesmVolume = "cloister-aesmd"
)

// AESMDir is the folder of AESM's socket, on the node and in the
// enclave's container.
var AESMDir = filepath.Dir(aesm.DefaultSocket)

// Enclave bounds: Gramine refuses sizes that are not powers of two.
const (
	minEnclaveSize = 1 << 20
	maxEnclaveSize = 1 << 40
)

// Enclave is an SGX workload's enclave.
type Enclave struct {
	// Container runs it; Size is its sgx.enclave_size in bytes, which
	// the container requests as EPC.
	Container string
	Size      int64
}

// ParseEnclaveSize reads a size as Gramine's manifests write it: a
// number of bytes with an optional K, M or G suffix (powers of 1024),
// which must be a power of two.
func ParseEnclaveSize(s string) (int64, error) {
	num, shift := s, 0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			num, shift = s[:n-1], 10
		case 'M', 'm':
			num, shift = s[:n-1], 20
		case 'G', 'g':
			num, shift = s[:n-1], 30
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || v > maxEnclaveSize>>shift {
		return 0, fmt.Errorf("enclave size %q: want a size as Gramine's sgx.enclave_size writes it, e.g. %q", s, DefaultEnclaveSize)
	}
	v <<= shift
	if v&(v-1) != 0 || v < minEnclaveSize {
		return 0, fmt.Errorf("enclave size %q: Gramine takes a power of two of at least 1M, e.g. %q", s, DefaultEnclaveSize)
	}
	return v, nil
}

// enclaveOf is the enclave container an SGX workload generate made
// names, or "" for any other pod template.
func enclaveOf(tmpl *kyaml.RNode) string {
	a, err := tmpl.Pipe(kyaml.Lookup("metadata", "annotations", EnclaveAnnotation))
	if err != nil || a == nil {
		return ""
	}
	return a.YNode().Value
}

// rewriteSGXPod rewrites one SGX pod template in place: its enclave
// container gets the SGX device, its enclave's size as EPC, the node's
// AESM socket, and where CAS and its node's LAS are.
func rewriteSGXPod(ctx context.Context, tmpl *kyaml.RNode, w *Workload, opts Options) error {
	meta, spec, annotations, err := openTemplate(tmpl, w)
	if err != nil {
		return err
	}
	if _, hasMesh, err := annotation.FromAnnotations(annotations); err != nil || hasMesh {
		return errors.Join(err, errors.New("an SGX pod with a service mesh annotation: the mesh proxy does not run in the enclave, so it would hold the workload's key outside it; terminate TLS in the enclave instead"))
	}
	if _, ok := annotations[PortForwardAnnotation]; ok {
		return fmt.Errorf("an SGX pod with annotation %s: its port forwarder relays to a VM's pods, and an SGX pod has none: remove the annotation", PortForwardAnnotation)
	}
	if opts.SkipInitializer || annotations[SkipInitializerAnnotation] == "true" {
		return errors.New("an SGX pod without the initializer: the enclave attests through it (its premain); remove " + SkipInitializerAnnotation + " or --skip-initializer")
	}
	var pod corev1.PodSpec
	if err := decodeNode(spec, &pod); err != nil {
		return fmt.Errorf("pod spec: %w", err)
	}
	if pod.RuntimeClassName != nil && !isConfidential(*pod.RuntimeClassName) {
		return fmt.Errorf("runtimeClassName %q: an SGX pod runs under its node's own runtime; mark it %s or remove the field", *pod.RuntimeClassName, Placeholder)
	}
	pod.RuntimeClassName = nil
	i, err := enclaveContainer(&pod, annotations[EnclaveAnnotation])
	if err != nil {
		return err
	}
	sizeText := annotations[EnclaveSizeAnnotation]
	if sizeText == "" {
		sizeText = DefaultEnclaveSize
	}
	size, err := ParseEnclaveSize(sizeText)
	if err != nil {
		return fmt.Errorf("annotation %s: %w", EnclaveSizeAnnotation, err)
	}
	c := &pod.Containers[i]
	w.Enclave = &Enclave{Container: c.Name, Size: size}
	enclaveResources(c, size)
	enclaveEnv(c, opts.CAS)
	mountAESM(&pod, c)
	// A pod generate made for a VM platform before: its initializer runs
	// in the enclave now.
	pod.InitContainers = slices.DeleteFunc(pod.InitContainers, func(c corev1.Container) bool { return c.Name == InitializerName })
	if err := pinImages(ctx, &pod, opts.Resolver); err != nil {
		return err
	}
	if err := setNode(spec, pod); err != nil {
		return err
	}
	a, err := meta.Pipe(kyaml.LookupCreate(kyaml.MappingNode, "annotations"))
	if err != nil {
		return err
	}
	if err := a.PipeE(kyaml.SetField(EnclaveAnnotation, kyaml.NewStringRNode(c.Name))); err != nil {
		return err
	}
	// The VM's policy of a pod generate made for a VM platform before.
	return a.PipeE(kyaml.Clear(podpolicy.Annotation))
}

// enclaveContainer is the index of the container the annotation names,
// or of the pod's only container.
func enclaveContainer(pod *corev1.PodSpec, name string) (int, error) {
	if name == "" {
		if len(pod.Containers) != 1 {
			return 0, fmt.Errorf("an SGX pod of %d containers: name the one that runs the enclave in annotation %s", len(pod.Containers), EnclaveAnnotation)
		}
		return 0, nil
	}
	for i, c := range pod.Containers {
		if c.Name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("annotation %s names container %q, which the pod does not have", EnclaveAnnotation, name)
}

// enclaveResources asks for one SGX enclave device and the enclave's
// EPC. Extended resources are requested by their limits alone.
func enclaveResources(c *corev1.Container, size int64) {
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	c.Resources.Limits[tee.SGXEnclave] = resource.MustParse("1")
	c.Resources.Limits[tee.SGXEPC] = *resource.NewQuantity(size, resource.BinarySI)
	delete(c.Resources.Requests, tee.SGXEnclave)
	delete(c.Resources.Requests, tee.SGXEPC)
}

// enclaveEnv gives the enclave where CAS and its node's LAS are: what the
// Gramine manifest passes through from the host (GramineManifest). What
// the enclave trusts is in its manifest, measured, never here.
func enclaveEnv(c *corev1.Container, cas string) {
	want := append(laswire.PodEnv(), corev1.EnvVar{Name: initenv.EnvCAS, Value: cas})
	env := slices.Clone(want)
	for _, e := range c.Env {
		if !slices.ContainsFunc(want, func(w corev1.EnvVar) bool { return w.Name == e.Name }) {
			env = append(env, e)
		}
	}
	c.Env = env
}

// mountAESM mounts the node's AESM folder into the enclave container,
// read-only: Gramine quotes through its socket.
func mountAESM(pod *corev1.PodSpec, c *corev1.Container) {
	if !hasMount(c, aesmVolume) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: aesmVolume, MountPath: AESMDir, ReadOnly: true})
	}
	if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == aesmVolume }) {
		return
	}
	dir := corev1.HostPathDirectory
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: aesmVolume,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: AESMDir, Type: &dir}}})
}

func (e *Enclave) String() string {
	return fmt.Sprintf("SGX enclave in container %s, EPC %s", e.Container, resource.NewQuantity(e.Size, resource.BinarySI))
}
