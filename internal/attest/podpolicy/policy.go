// Package podpolicy owns a confidential pod's policy: the canonical
// document of what the pod may run (images by digest, commands, arguments,
// environment, mounts, security context, volumes), its initdata encoding
// (the io.katacontainers.config.hypervisor.cc_init_data annotation Kata,
// Contrast and Trustee read) and its digest, the pod's identity in a CAS
// manifest (SEV-SNP HOSTDATA, TDX MRCONFIGID; in simulation LAS reports it).
package podpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Version is the schema of the policy document.
const Version = "cloister.dev/pod-policy/v1"

// Policy is what a confidential pod may run. Two pods with the same policy
// are the same workload to CAS: names, labels, scheduling and resources
// are the host's business and are left out.
type Policy struct {
	Version        string      `json:"version"`
	InitContainers []Container `json:"initContainers,omitempty"`
	Containers     []Container `json:"containers"`
	Volumes        []Volume    `json:"volumes,omitempty"`
	// Host namespaces break the pod's isolation; they are part of what is
	// attested so a host cannot turn them on silently.
	HostNetwork           bool                       `json:"hostNetwork,omitempty"`
	HostPID               bool                       `json:"hostPID,omitempty"`
	HostIPC               bool                       `json:"hostIPC,omitempty"`
	ShareProcessNamespace bool                       `json:"shareProcessNamespace,omitempty"`
	SecurityContext       *corev1.PodSecurityContext `json:"securityContext,omitempty"`
	// Annotations that shape the pod's VM: the devices passed into it
	// (CDI) and its memory.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// The annotations a policy covers.
const (
	// CDIAnnotationPrefix names devices (GPUs) passed into the VM.
	CDIAnnotationPrefix = "cdi.k8s.io/"
	// DefaultMemoryAnnotation is the VM's memory in MiB.
	DefaultMemoryAnnotation = "io.katacontainers.config.hypervisor.default_memory"
	// AllowExecAnnotation lists commands the guest lets the host exec
	// beyond the pod spec's probes and hooks, by container (JSON:
	// {"web": [["cat", "/tmp/state"]]}): each exactly as written.
	AllowExecAnnotation = "cloister.dev/allow-exec"
)

// attested picks the annotations a policy covers.
func attested(annotations map[string]string) map[string]string {
	var out map[string]string
	for k, v := range annotations {
		if strings.HasPrefix(k, CDIAnnotationPrefix) || k == DefaultMemoryAnnotation {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// Container is one container's part of the policy.
type Container struct {
	Name            string                  `json:"name"`
	Image           string                  `json:"image"`
	Command         []string                `json:"command,omitempty"`
	Args            []string                `json:"args,omitempty"`
	WorkingDir      string                  `json:"workingDir,omitempty"`
	Env             []corev1.EnvVar         `json:"env,omitempty"`
	EnvFrom         []corev1.EnvFromSource  `json:"envFrom,omitempty"`
	VolumeMounts    []corev1.VolumeMount    `json:"volumeMounts,omitempty"`
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
	// RestartPolicy Always marks a native sidecar among init containers.
	RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
	// Exec are the commands the kubelet runs in the container: its exec
	// probes and lifecycle hooks, the only execs the guest allows.
	Exec [][]string `json:"exec,omitempty"`
	// ImageConfig is what the image (by its digest) runs when the pod
	// does not say: generate reads it from the registry.
	ImageConfig *ImageConfig `json:"imageConfig,omitempty"`
}

// ImageConfig is the part of an image's configuration that decides what
// a container runs.
type ImageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Volume is a volume by name and source. The source's description is
// kept whole: a host path or a Secret's name changes what the pod sees.
type Volume struct {
	Name   string              `json:"name"`
	Source corev1.VolumeSource `json:"source"`
}

// Of is the policy of a pod's spec and annotations. Every image must
// already be pinned to a digest: a tag names whatever the registry serves
// today, which no policy can vouch for.
func Of(spec *corev1.PodSpec, annotations map[string]string) (*Policy, error) {
	p := &Policy{
		Version:               Version,
		Annotations:           attested(annotations),
		HostNetwork:           spec.HostNetwork,
		HostPID:               spec.HostPID,
		HostIPC:               spec.HostIPC,
		ShareProcessNamespace: spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace,
		SecurityContext:       spec.SecurityContext,
	}
	var err error
	if p.InitContainers, err = containers("initContainers", spec.InitContainers); err != nil {
		return nil, err
	}
	if p.Containers, err = containers("containers", spec.Containers); err != nil {
		return nil, err
	}
	if err := p.allowExec(annotations[AllowExecAnnotation]); err != nil {
		return nil, err
	}
	for _, v := range spec.Volumes {
		p.Volumes = append(p.Volumes, Volume{Name: v.Name, Source: v.VolumeSource})
	}
	// Volumes are a set to the pod; their order in the YAML is not policy.
	slices.SortFunc(p.Volumes, func(a, b Volume) int { return strings.Compare(a.Name, b.Name) })
	return p, nil
}

func containers(field string, cs []corev1.Container) ([]Container, error) {
	var out []Container
	for i, c := range cs {
		if !Pinned(c.Image) {
			return nil, fmt.Errorf("%s[%d] (%s): image %q is not pinned to a digest (NAME@sha256:...)", field, i, c.Name, c.Image)
		}
		out = append(out, Container{
			Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, WorkingDir: c.WorkingDir,
			Env: c.Env, EnvFrom: c.EnvFrom, VolumeMounts: c.VolumeMounts, SecurityContext: c.SecurityContext,
			RestartPolicy: c.RestartPolicy, Exec: execs(&c),
		})
	}
	return out, nil
}

// allowExec adds the annotation's commands to their containers' execs.
func (p *Policy) allowExec(value string) error {
	if value == "" {
		return nil
	}
	var allow map[string][][]string
	dec := json.NewDecoder(strings.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&allow); err != nil {
		return fmt.Errorf("annotation %s: %w (want {\"CONTAINER\": [[\"COMMAND\", \"ARG\"]]})", AllowExecAnnotation, err)
	}
	for _, name := range slices.Sorted(maps.Keys(allow)) {
		c := p.container(name)
		if c.Name == "" {
			return fmt.Errorf("annotation %s: no container %q in the pod", AllowExecAnnotation, name)
		}
		for _, cmd := range allow[name] {
			if len(cmd) == 0 || cmd[0] == "" {
				return fmt.Errorf("annotation %s: container %s: an empty command", AllowExecAnnotation, name)
			}
			if !slices.ContainsFunc(c.Exec, func(x []string) bool { return slices.Equal(x, cmd) }) {
				c.Exec = append(c.Exec, cmd)
			}
		}
	}
	return nil
}

// execs are the commands the kubelet execs in a container, each once,
// in the order the spec gives them.
func execs(c *corev1.Container) [][]string {
	var out [][]string
	add := func(h *corev1.ExecAction) {
		if h != nil && len(h.Command) > 0 && !slices.ContainsFunc(out, func(x []string) bool { return slices.Equal(x, h.Command) }) {
			out = append(out, h.Command)
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p != nil {
			add(p.Exec)
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
			if h != nil {
				add(h.Exec)
			}
		}
	}
	return out
}

// Pinned says whether image names a digest.
func Pinned(image string) bool {
	_, digest, ok := strings.Cut(image, "@")
	return ok && strings.HasPrefix(digest, "sha256:") && len(digest) == len("sha256:")+64
}

// Canonical is the policy's JSON: fields in schema order, so the same pod
// always gives the same bytes.
func (p *Policy) Canonical() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic("podpolicy: marshalling a policy: " + err.Error())
	}
	return b
}

// Warnings name what the policy cannot vouch for: values the host
// supplies at run time, unattested, such as environment variables taken
// from Secrets or ConfigMaps.
func (p *Policy) Warnings() []string {
	var out []string
	for _, c := range append(slices.Clone(p.InitContainers), p.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			switch {
			case e.ValueFrom.SecretKeyRef != nil:
				out = append(out, fmt.Sprintf("container %s: env %s comes from Secret %s, which the host supplies unattested; keep secrets in the CAS manifest instead",
					c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name))
			case e.ValueFrom.ConfigMapKeyRef != nil:
				out = append(out, fmt.Sprintf("container %s: env %s comes from ConfigMap %s, which the host can change without changing the policy",
					c.Name, e.Name, e.ValueFrom.ConfigMapKeyRef.Name))
			}
		}
		for _, f := range c.EnvFrom {
			if f.SecretRef != nil {
				out = append(out, fmt.Sprintf("container %s: envFrom Secret %s is supplied by the host unattested; keep secrets in the CAS manifest instead", c.Name, f.SecretRef.Name))
			}
		}
	}
	return out
}

// Digest is the hex SHA-256 of data.
func Digest(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// Check says how a running pod's spec departs from the policy, or nil.
// It is what simulation can check from outside the pod (on hardware the
// guest enforces the whole policy): every container's image, command,
// arguments, working folder and literal environment, the host
// namespaces and privileged mode, and the VM's annotations. The API server's defaults (the service
// account token mount, default modes) are not compared.
func (p *Policy) Check(spec *corev1.PodSpec, annotations map[string]string) error {
	if got := attested(annotations); !maps.Equal(got, p.Annotations) {
		return fmt.Errorf("annotations %v, the policy has %v", got, p.Annotations)
	}
	if spec.HostNetwork != p.HostNetwork || spec.HostPID != p.HostPID || spec.HostIPC != p.HostIPC {
		return fmt.Errorf("host namespaces (network %v, pid %v, ipc %v) differ from the policy's (%v, %v, %v)",
			spec.HostNetwork, spec.HostPID, spec.HostIPC, p.HostNetwork, p.HostPID, p.HostIPC)
	}
	for _, set := range []struct {
		field string
		want  []Container
		got   []corev1.Container
	}{{"initContainers", p.InitContainers, spec.InitContainers}, {"containers", p.Containers, spec.Containers}} {
		if len(set.got) != len(set.want) {
			return fmt.Errorf("%s: %d, the policy has %d", set.field, len(set.got), len(set.want))
		}
		for i, want := range set.want {
			if err := want.check(&set.got[i]); err != nil {
				return fmt.Errorf("%s[%d] (%s): %w", set.field, i, set.got[i].Name, err)
			}
		}
	}
	return nil
}

func (want *Container) check(got *corev1.Container) error {
	switch {
	case got.Name != want.Name:
		return fmt.Errorf("name %q, the policy has %q", got.Name, want.Name)
	case got.Image != want.Image:
		return fmt.Errorf("image %q, the policy has %q", got.Image, want.Image)
	case !slices.Equal(got.Command, want.Command):
		return fmt.Errorf("command %q, the policy has %q", got.Command, want.Command)
	case !slices.Equal(got.Args, want.Args):
		return fmt.Errorf("args %q, the policy has %q", got.Args, want.Args)
	case got.WorkingDir != want.WorkingDir:
		return fmt.Errorf("workingDir %q, the policy has %q", got.WorkingDir, want.WorkingDir)
	case privileged(got.SecurityContext) != privileged(want.SecurityContext):
		return fmt.Errorf("privileged %v, the policy has %v", privileged(got.SecurityContext), privileged(want.SecurityContext))
	}
	literal := func(env []corev1.EnvVar) map[string]string {
		m := map[string]string{}
		for _, e := range env {
			if e.ValueFrom == nil {
				m[e.Name] = e.Value
			}
		}
		return m
	}
	g, w := literal(got.Env), literal(want.Env)
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if v, ok := g[k]; !ok || v != w[k] {
			return fmt.Errorf("env %s is %q, the policy has %q", k, v, w[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g)) {
		if _, ok := w[k]; !ok {
			return fmt.Errorf("env %s is not in the policy", k)
		}
	}
	return nil
}

func privileged(sc *corev1.SecurityContext) bool {
	return sc != nil && sc.Privileged != nil && *sc.Privileged
}
