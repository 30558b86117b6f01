package podpolicy

import (
	"fmt"
	"strings"
)

// Explain says in plain words what the guest allows the host to do with
// the pod, from the same data the agent's policy holds.
func (p *Policy) Explain() string {
	d := p.regoData()
	var b strings.Builder
	for _, c := range d.Containers {
		src := p.container(c.Name)
		fmt.Fprintf(&b, "container %s, image %s:\n", c.Name, src.Image)
		run := strings.Join(quoted(src.commandLine()), " ")
		switch {
		case c.ArgsAnyPrefix && run == "":
			run = "whatever the image's entrypoint is (its configuration was not known)"
		case c.ArgsAnyPrefix:
			run = "the image's entrypoint (not known) followed by " + run
		}
		fmt.Fprintf(&b, "  runs %s\n", run)
		if c.Cwd != "" {
			fmt.Fprintf(&b, "  in %s\n", c.Cwd)
		}
		switch {
		case c.UID >= 0 && c.GID >= 0:
			fmt.Fprintf(&b, "  as user %d, group %d\n", c.UID, c.GID)
		case c.UID >= 0:
			fmt.Fprintf(&b, "  as user %d\n", c.UID)
		case c.RunAsNonRoot:
			b.WriteString("  as any user but root\n")
		default:
			b.WriteString("  as any user (the image's is not known)\n")
		}
		for _, e := range src.Env {
			if e.ValueFrom != nil {
				fmt.Fprintf(&b, "  env %s: any value (the host supplies it)\n", e.Name)
			} else {
				fmt.Fprintf(&b, "  env %s=%s\n", e.Name, e.Value)
			}
		}
		if c.EnvFrom {
			b.WriteString("  env: any other variable the host supplies (envFrom), except loader, runtime, proxy and trust-store variables such as LD_PRELOAD, JAVA_TOOL_OPTIONS, HTTPS_PROXY or SSL_CERT_FILE\n")
		}
		for _, m := range c.Mounts {
			mode := "read-write"
			if m.ReadOnly {
				mode = "read-only"
			}
			fmt.Fprintf(&b, "  volume at %s, %s\n", m.Path, mode)
		}
		switch {
		case c.Privileged:
			b.WriteString("  privileged: every capability, and the VM's devices\n")
		default:
			fmt.Fprintf(&b, "  capabilities: %s\n", orNone(strings.Join(c.Capabilities, ", ")))
		}
		if c.ReadonlyRoot {
			b.WriteString("  its root file system read-only\n")
		}
		if c.NoNewPrivileges {
			b.WriteString("  no privilege escalation\n")
		}
		for _, cmd := range c.Exec {
			fmt.Fprintf(&b, "  exec: %s\n", strings.Join(quoted(cmd), " "))
		}
	}
	b.WriteString("the sandbox: one, its process namespace ")
	if d.ShareProcessNamespace {
		b.WriteString("shared by the containers")
	} else {
		b.WriteString("per container")
	}
	b.WriteString(", no kernel modules, no guest hooks\n")
	b.WriteString("denied: any other container, image, command line, variable, volume, device or privilege; an exec of any other command;\n" +
		"  a new agent policy (SetPolicy); writing to a process's input; files copied outside the pod's shared folder; the guest's clock and randomness\n")
	b.WriteString("not enforced: the containers' start order, and the values the host supplies (named above)\n")
	return b.String()
}

// container is the named container of the policy, or an empty one.
func (p *Policy) container(name string) *Container {
	for _, set := range [][]Container{p.InitContainers, p.Containers} {
		for i := range set {
			if set[i].Name == name {
				return &set[i]
			}
		}
	}
	return &Container{}
}

// commandLine is what the container runs, as far as the policy knows:
// the pod's command, else the image's entrypoint; the pod's arguments,
// else (without a pod command) the image's. Without the image's
// configuration and a pod command, the entrypoint is unknown.
func (c *Container) commandLine() []string {
	switch img := c.ImageConfig; {
	case len(c.Command) > 0:
		return append(append([]string{}, c.Command...), c.Args...)
	case img != nil && len(c.Args) > 0:
		return append(append([]string{}, img.Entrypoint...), c.Args...)
	case img != nil:
		return append(append([]string{}, img.Entrypoint...), img.Cmd...)
	}
	return c.Args
}

func quoted(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$") {
			a = fmt.Sprintf("%q", a)
		}
		out[i] = a
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
