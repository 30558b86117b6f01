package podpolicy

import (
	_ "embed"
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The kata agent's policy: its file in the initdata, and where the
// request shapes its rules match come from.
const (
	// RegoKey is the agent policy's file among the initdata's data; the
	// agent reads it, and its engine (regorus) enforces it.
	RegoKey = "policy.rego"
	// KataSource names the kata-containers source whose genpolicy test
	// cases (src/tools/genpolicy/tests/policy/testdata) give the shapes
	// of the agent's requests, and whose agent evaluates the policy.
	KataSource = "kata-containers/kata-containers@28c46f5eb764fe2dc26c7273e1d64d343a33f0dc"
	// RegorusVersion is the agent's policy engine whose builtins
	// (docs/builtins.md) the rules may call.
	RegorusVersion = "regorus 0.9.1"
)

//go:embed agent_policy.rego
var regoRules string

const regoHeader = "# The kata agent's policy for this pod, made by cloister generate from the\n" +
	"# pod's policy (" + DataKey + ", beside it in the initdata): every request\n" +
	"# the agent receives from the host is denied unless a rule allows it.\n" +
	"# Do not edit: run cloister generate again.\n" +
	"# Request shapes: " + KataSource + ",\n" +
	"# src/tools/genpolicy/tests/policy/testdata. Builtins: " + RegorusVersion + ".\n"

// defaultCapabilities are the ones containerd gives a container that
// asks for none; a securityContext adds to and drops from them.
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// regoData is policy_data: what the rules compare requests with.
type regoData struct {
	Containers            []regoContainer   `json:"containers"`
	ShareProcessNamespace bool              `json:"share_process_namespace"`
	Sysctls               map[string]string `json:"sysctls"`
	VMDevices             bool              `json:"vm_devices"`
}

type regoContainer struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	// Args are anchored patterns, one per argument; with ArgsAnyPrefix
	// they end the command line (the image's entrypoint is unknown).
	Args          []string `json:"args"`
	ArgsAnyPrefix bool     `json:"args_any_prefix"`
	Cwd           string   `json:"cwd"`
	// Env are patterns of whole NAME=value entries; EnvRequired those
	// that must be there.
	Env             []string    `json:"env"`
	EnvRequired     []string    `json:"env_required"`
	EnvNames        []string    `json:"env_names"`
	EnvFrom         bool        `json:"env_from"`
	ImageEnv        []string    `json:"image_env"`
	ImageEnvUnknown bool        `json:"image_env_unknown"`
	Mounts          []regoMount `json:"mounts"`
	Privileged      bool        `json:"privileged"`
	ReadonlyRoot    bool        `json:"readonly_root"`
	NoNewPrivileges bool        `json:"no_new_privileges"`
	// UID and GID are -1 where the policy leaves them to the image.
	UID          int64      `json:"uid"`
	GID          int64      `json:"gid"`
	RunAsNonRoot bool       `json:"run_as_non_root"`
	Capabilities []string   `json:"capabilities"`
	Exec         [][]string `json:"exec"`
}

// regoMount is a container's mount and where its source must be in the
// guest: kata puts each kind of volume in its own place, so a mount is
// allowed only from the place of the volume it names.
type regoMount struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only"`
	// Kind is mountLocal, mountMemory or mountShared.
	Kind   string `json:"kind"`
	Volume string `json:"volume"`
	// SubPath is "" or "/" and the mount's subPath (emptyDir only).
	SubPath string `json:"sub_path"`
	// BaseRe is the quoted last element of Path: a shared mount's source
	// ends with it (kata names the copy it shares after it).
	BaseRe string `json:"base_re"`
}

// Where a volume's mount comes from in the guest (genpolicy's settings).
const (
	// mountLocal: an emptyDir on the guest's disk, the sandbox's folder
	// local/VOLUME, made by a "local" storage.
	mountLocal = "local"
	// mountMemory: an emptyDir in the guest's memory,
	// /run/kata-containers/sandbox/ephemeral/VOLUME, an "ephemeral"
	// storage.
	mountMemory = "memory"
	// mountShared: what the host supplies (ConfigMaps, Secrets, projected
	// and downward API volumes, claims, host paths), copied into the
	// shared folder under the container's id and the mount's last element.
	mountShared = "shared"
)

// Rego is the kata agent's policy for the pod: the fixed rules and the
// pod's data, the same bytes for the same policy.
func (p *Policy) Rego() []byte { return []byte(p.rego()) }

func (p *Policy) rego() string {
	data, err := json.MarshalIndent(p.regoData(), "", "\t")
	if err != nil {
		panic("podpolicy: marshalling the agent policy's data: " + err.Error())
	}
	var b strings.Builder
	b.Grow(len(regoHeader) + len(regoRules) + len(data) + 32)
	b.WriteString(regoHeader)
	b.WriteString(regoRules)
	b.WriteString("\npolicy_data := ")
	b.Write(data)
	b.WriteString("\n")
	return b.String()
}

func (p *Policy) regoData() regoData {
	d := regoData{ShareProcessNamespace: p.ShareProcessNamespace, Sysctls: map[string]string{}, Containers: []regoContainer{}}
	if p.SecurityContext != nil {
		for _, s := range p.SecurityContext.Sysctls {
			d.Sysctls[s.Name] = s.Value
		}
	}
	for k := range p.Annotations {
		if strings.HasPrefix(k, CDIAnnotationPrefix) {
			d.VMDevices = true
		}
	}
	for _, c := range append(slices.Clone(p.InitContainers), p.Containers...) {
		d.Containers = append(d.Containers, p.regoContainer(&c))
	}
	return d
}

func (p *Policy) regoContainer(c *Container) regoContainer {
	_, digest, _ := strings.Cut(c.Image, "@")
	r := regoContainer{
		Name: c.Name, Digest: digest, Cwd: c.WorkingDir,
		Env: []string{}, EnvRequired: []string{}, EnvNames: []string{}, ImageEnv: []string{},
		Mounts: []regoMount{}, Exec: [][]string{}, UID: -1, GID: -1,
		EnvFrom: len(c.EnvFrom) > 0,
	}
	if c.Exec != nil {
		r.Exec = c.Exec
	}
	img := c.ImageConfig
	r.ImageEnvUnknown = img == nil

	// The command line: the pod's command, else the image's entrypoint;
	// the pod's arguments, else (without a pod command) the image's.
	argv := c.commandLine()
	r.ArgsAnyPrefix = len(c.Command) == 0 && img == nil
	r.Args = []string{}
	for _, a := range argv {
		r.Args = append(r.Args, "^"+expandable(a)+"$")
	}
	if img != nil {
		r.ImageEnv = append(r.ImageEnv, img.Env...)
		if r.Cwd == "" {
			r.Cwd = img.WorkingDir
			if r.Cwd == "" {
				r.Cwd = "/"
			}
		}
	}
	for _, e := range c.Env {
		r.EnvNames = append(r.EnvNames, e.Name)
		pattern := "(?s)^" + regexp.QuoteMeta(e.Name) + "="
		required := true
		switch {
		case e.ValueFrom != nil:
			pattern += ".*$"
			required = !optional(e.ValueFrom)
		default:
			pattern += expandable(e.Value) + "$"
		}
		r.Env = append(r.Env, pattern)
		if required {
			r.EnvRequired = append(r.EnvRequired, pattern)
		}
	}
	for _, m := range c.VolumeMounts {
		r.Mounts = append(r.Mounts, p.regoMount(m))
	}

	sc, pod := c.SecurityContext, p.SecurityContext
	if sc != nil {
		r.Privileged = sc.Privileged != nil && *sc.Privileged
		r.ReadonlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		r.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	}
	switch {
	case sc != nil && sc.RunAsUser != nil:
		r.UID = *sc.RunAsUser
	case pod != nil && pod.RunAsUser != nil:
		r.UID = *pod.RunAsUser
	case img != nil:
		r.UID, r.GID = imageUser(img.User)
	}
	switch {
	case sc != nil && sc.RunAsGroup != nil:
		r.GID = *sc.RunAsGroup
	case pod != nil && pod.RunAsGroup != nil:
		r.GID = *pod.RunAsGroup
	}
	r.RunAsNonRoot = (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) ||
		(pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot && (sc == nil || sc.RunAsNonRoot == nil))
	r.Capabilities = capabilities(sc)
	return r
}

func (p *Policy) regoMount(m corev1.VolumeMount) regoMount {
	r := regoMount{Path: m.MountPath, ReadOnly: m.ReadOnly, Kind: mountShared, Volume: m.Name,
		BaseRe: regexp.QuoteMeta(path.Base(m.MountPath))}
	for _, v := range p.Volumes {
		if v.Name != m.Name || v.Source.EmptyDir == nil || m.SubPathExpr != "" {
			continue
		}
		r.Kind = mountLocal
		if v.Source.EmptyDir.Medium == corev1.StorageMediumMemory {
			r.Kind = mountMemory
		}
		if m.SubPath != "" {
			r.SubPath = "/" + m.SubPath
		}
	}
	return r
}

// expandable quotes s as a pattern in which each $(VAR) reference the
// kubelet may expand matches any value ($$ is its escaped $).
func expandable(s string) string {
	var b strings.Builder
	for s != "" {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(s))
			break
		}
		b.WriteString(regexp.QuoteMeta(s[:i]))
		rest := s[i:]
		j := strings.IndexByte(rest, ')')
		switch {
		case strings.HasPrefix(rest, "$$"):
			b.WriteString(`\$`)
			s = rest[2:]
		case strings.HasPrefix(rest, "$(") && j > 0:
			b.WriteString(".*")
			s = rest[j+1:]
		default:
			b.WriteString(`\$`)
			s = rest[1:]
		}
	}
	return b.String()
}

func optional(src *corev1.EnvVarSource) bool {
	switch {
	case src.SecretKeyRef != nil:
		return src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional
	case src.ConfigMapKeyRef != nil:
		return src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional
	}
	return false
}

// imageUser reads an image's numeric USER (uid or uid:gid); a name
// needs the image's passwd, so it fixes nothing.
func imageUser(user string) (uid, gid int64) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, gid = -1, -1
	if user == "" {
		return 0, -1
	}
	if n, err := strconv.ParseInt(u, 10, 64); err == nil {
		uid = n
	}
	if n, err := strconv.ParseInt(g, 10, 64); hasGroup && err == nil {
		gid = n
	}
	return uid, gid
}

// capabilities are what a container may hold: containerd's defaults,
// less what it drops, with what it adds.
func capabilities(sc *corev1.SecurityContext) []string {
	caps := slices.Clone(defaultCapabilities)
	if sc == nil || sc.Capabilities == nil {
		return caps
	}
	name := func(c corev1.Capability) string {
		s := strings.ToUpper(string(c))
		if !strings.HasPrefix(s, "CAP_") {
			s = "CAP_" + s
		}
		return s
	}
	for _, d := range sc.Capabilities.Drop {
		if strings.EqualFold(string(d), "ALL") {
			caps = caps[:0]
			break
		}
		caps = slices.DeleteFunc(caps, func(c string) bool { return c == name(d) })
	}
	for _, a := range sc.Capabilities.Add {
		if !slices.Contains(caps, name(a)) {
			caps = append(caps, name(a))
		}
	}
	return caps
}
