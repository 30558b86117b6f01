package generate

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cloister-cc/cloister/internal/mesh/annotation"
)

// probeKinds name a container's probes, in the order generate visits
// them.
var probeKinds = []string{"startup", "liveness", "readiness"}

func probesOf(c *corev1.Container) []*corev1.Probe {
	return []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe}
}

// meshProbes points the kubelet's HTTP probes of redirected ports at the
// proxy's admin port, which probes the app on loopback: the kubelet has
// no mesh certificate, and a probe sent to the port itself would reach
// the proxy's TLS. It returns the proxy's flags naming each probe's
// own URL, which is where rerunning finds it again.
func meshProbes(pod *corev1.PodSpec, cfg annotation.IngressConfig) []string {
	if cfg.Disabled {
		return nil
	}
	plain := cfg.PlainPorts()
	var flags []string
	for i := range pod.Containers {
		c := &pod.Containers[i]
		for k, p := range probesOf(c) {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "" {
				continue
			}
			port, ok := containerPort(c, p.HTTPGet.Port)
			if !ok || slices.Contains(plain, port) || port == annotation.AdminPort {
				continue
			}
			name := c.Name + "/" + probeKinds[k]
			scheme := strings.ToLower(string(p.HTTPGet.Scheme))
			if scheme == "" {
				scheme = "http"
			}
			target := (&url.URL{Scheme: scheme, Host: "127.0.0.1:" + strconv.Itoa(int(port)), Path: p.HTTPGet.Path}).String()
			flags = append(flags, annotation.AppProbeFlag+"="+name+"="+target)
			p.HTTPGet.Path, p.HTTPGet.Port, p.HTTPGet.Scheme = annotation.AppHealthPath+name, intstr.FromInt32(annotation.AdminPort), corev1.URISchemeHTTP
		}
	}
	return flags
}

// restoreProbes gives back the probes an earlier run pointed at the
// proxy, from the proxy's flags, before the mesh is injected again (or
// left out).
func restoreProbes(pod *corev1.PodSpec) error {
	for _, proxy := range pod.InitContainers {
		if proxy.Name != MeshName {
			continue
		}
		for _, arg := range proxy.Args {
			v, ok := strings.CutPrefix(arg, annotation.AppProbeFlag+"=")
			if !ok {
				continue
			}
			name, target, _ := strings.Cut(v, "=")
			container, kind, _ := strings.Cut(name, "/")
			u, err := url.Parse(target)
			k := slices.Index(probeKinds, kind)
			if err != nil || k < 0 {
				return fmt.Errorf("%s: %s %q is not one generate wrote", MeshName, annotation.AppProbeFlag, v)
			}
			port, err := strconv.ParseInt(u.Port(), 10, 32)
			if err != nil {
				return fmt.Errorf("%s: %s %q: %w", MeshName, annotation.AppProbeFlag, v, err)
			}
			for i := range pod.Containers {
				c := &pod.Containers[i]
				if p := probesOf(c)[k]; c.Name == container && p != nil && p.HTTPGet != nil && p.HTTPGet.Path == annotation.AppHealthPath+name {
					p.HTTPGet.Path, p.HTTPGet.Port = u.Path, intstr.FromInt32(int32(port))
					p.HTTPGet.Scheme = corev1.URIScheme(strings.ToUpper(u.Scheme))
				}
			}
		}
	}
	return nil
}

// containerPort resolves a probe's port, by number or by the name of one
// of the container's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString) (uint16, bool) {
	if p.Type == intstr.Int {
		return uint16(p.IntVal), p.IntVal > 0 && p.IntVal < 1<<16 //nolint:gosec // checked to be a port
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return uint16(cp.ContainerPort), cp.ContainerPort > 0 && cp.ContainerPort < 1<<16 //nolint:gosec // checked to be a port
		}
	}
	return 0, false
}
