// Package annotation owns the service mesh's annotation grammar: which
// ports of a pod the mesh's ingress terminates TLS for (and how), and which
// loopback addresses its egress listens on for which upstreams. It is pure:
// generate checks the annotations with it, and the mesh sidecar reads its
// configuration with it.
//
// The grammar is Contrast's, and Contrast's annotation names are read too,
// so its users migrate unchanged:
//
//	ingress: name#port#disableTLS, entries joined by ##
//	         absent or empty: every port needs mTLS; DISABLED: no ingress proxy
//	egress:  name#listenIP:port#host:port, entries joined by ##
package annotation

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The annotations, Cloister's and Contrast's names.
const (
	IngressAnnotation         = "cloister.dev/servicemesh-ingress"
	EgressAnnotation          = "cloister.dev/servicemesh-egress"
	ContrastIngressAnnotation = "contrast.edgeless.systems/servicemesh-ingress"
	ContrastEgressAnnotation  = "contrast.edgeless.systems/servicemesh-egress"
)

// The mesh proxy's own ports in the pod: inbound connections are
// redirected to ProxyPort, AdminPort serves its health and metrics in
// plain text. The app cannot use them.
const (
	ProxyPort = 15006
	AdminPort = 15000
	// AppHealthPath is where the admin port answers the kubelet's probes
	// of meshed ports, by probe name (CONTAINER/KIND): generate points the
	// probes there, as Istio does, since the kubelet has no mesh
	// certificate, and passes the app's own probe URL in AppProbeFlag.
	AppHealthPath = "/app-health/"
	AppProbeFlag  = "--app-probe"
)

func reserved(p uint16) error {
	if p == ProxyPort || p == AdminPort {
		return fmt.Errorf("port %d is the mesh proxy's own (%d and %d are reserved): move the app to another port", p, AdminPort, ProxyPort)
	}
	return nil
}

// Disabled as the ingress annotation turns the ingress proxy off.
const Disabled = "DISABLED"

const (
	entrySep = "##"
	fieldSep = "#"
)

// TLS is how the ingress treats a port.
type TLS int

const (
	// MutualTLS: TLS with a client certificate from the mesh CA; every
	// port not listed.
	MutualTLS TLS = iota
	// ServerTLS: TLS without a client certificate (disableTLS false).
	ServerTLS
	// Plain: no TLS, the port is not redirected (disableTLS true).
	Plain
)

// Ingress is one listed port.
type Ingress struct {
	Name string
	Port uint16
	TLS  TLS
}

// IngressConfig is the ingress annotation.
type IngressConfig struct {
	// Disabled: no ingress proxy at all.
	Disabled bool
	// Ports listed; every other port needs mTLS.
	Ports []Ingress
}

// Egress is one upstream the app reaches at a loopback address.
type Egress struct {
	Name string
	// Listen is where the app connects, in 127.0.0.0/8.
	Listen netip.AddrPort
	// Upstream is host:port the proxy opens mTLS to.
	Upstream string
}

// name: what the proxy calls an entry in logs and metrics.
var name = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// entries splits a value into its entries, refusing empty ones.
func entries(kind, value string) ([]string, error) {
	parts := strings.Split(value, entrySep)
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("%s entry %d is empty: entries are joined by a single %q", kind, i+1, entrySep)
		}
	}
	return parts, nil
}

func entryError(kind string, i int, entry, format string, args ...any) error {
	return fmt.Errorf("%s entry %d %q: %s", kind, i+1, entry, fmt.Sprintf(format, args...))
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 || strconv.FormatUint(p, 10) != s {
		return 0, fmt.Errorf("port %q is not a port (1-65535)", s)
	}
	return uint16(p), nil
}

// ParseIngress reads an ingress annotation's value.
func ParseIngress(value string) (IngressConfig, error) {
	switch value {
	case "":
		return IngressConfig{}, nil
	case Disabled:
		return IngressConfig{Disabled: true}, nil
	}
	parts, err := entries("ingress", value)
	if err != nil {
		return IngressConfig{}, err
	}
	var cfg IngressConfig
	for i, e := range parts {
		f := strings.Split(e, fieldSep)
		if len(f) != 3 {
			return IngressConfig{}, entryError("ingress", i, e, "want name#port#disableTLS (e.g. main#8001#false), got %d fields", len(f))
		}
		if !name.MatchString(f[0]) {
			return IngressConfig{}, entryError("ingress", i, e, "name %q must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit", f[0])
		}
		port, err := parsePort(f[1])
		if err == nil {
			err = reserved(port)
		}
		if err != nil {
			return IngressConfig{}, entryError("ingress", i, e, "%v", err)
		}
		in := Ingress{Name: f[0], Port: port}
		switch f[2] {
		case "false":
			in.TLS = ServerTLS
		case "true":
			in.TLS = Plain
		default:
			return IngressConfig{}, entryError("ingress", i, e, "disableTLS %q must be true (plain) or false (TLS without a client certificate)", f[2])
		}
		for _, prev := range cfg.Ports {
			if prev.Name == in.Name {
				return IngressConfig{}, entryError("ingress", i, e, "name %s is used twice", in.Name)
			}
			if prev.Port == in.Port {
				return IngressConfig{}, entryError("ingress", i, e, "port %d is listed twice", in.Port)
			}
		}
		cfg.Ports = append(cfg.Ports, in)
	}
	return cfg, nil
}

// ParseEgress reads an egress annotation's value.
func ParseEgress(value string) ([]Egress, error) {
	if value == "" {
		return nil, nil
	}
	parts, err := entries("egress", value)
	if err != nil {
		return nil, err
	}
	var out []Egress
	for i, e := range parts {
		f := strings.Split(e, fieldSep)
		if len(f) != 3 {
			return nil, entryError("egress", i, e, "want name#127.x.y.z:port#host:port (e.g. backend#127.0.0.2:4001#backend.default:4001), got %d fields", len(f))
		}
		if !name.MatchString(f[0]) {
			return nil, entryError("egress", i, e, "name %q must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit", f[0])
		}
		listen, err := netip.ParseAddrPort(f[1])
		if err != nil || !listen.Addr().Is4() || !listen.Addr().IsLoopback() || listen.Port() == 0 {
			return nil, entryError("egress", i, e, "listen address %q must be an IPv4 loopback address with a port, 127.x.y.z:port", f[1])
		}
		if err := reserved(listen.Port()); err != nil {
			return nil, entryError("egress", i, e, "%v", err)
		}
		if err := checkUpstream(f[2]); err != nil {
			return nil, entryError("egress", i, e, "%v", err)
		}
		eg := Egress{Name: f[0], Listen: listen, Upstream: f[2]}
		for _, prev := range out {
			if prev.Name == eg.Name {
				return nil, entryError("egress", i, e, "name %s is used twice", eg.Name)
			}
			if prev.Listen == eg.Listen {
				return nil, entryError("egress", i, e, "listen address %s is used twice", eg.Listen)
			}
		}
		out = append(out, eg)
	}
	return out, nil
}

// dnsName is a DNS name as Services and hosts are called.
var dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$`)

func checkUpstream(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("upstream %q must be host:port (e.g. backend.default:4001)", s)
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("upstream %q: %w", s, err)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if len(host) > 253 || !dnsName.MatchString(host) {
		return fmt.Errorf("upstream host %q is neither an IP address nor a lowercase DNS name", host)
	}
	return nil
}

// String is the annotation value that parses to c.
func (c IngressConfig) String() string {
	if c.Disabled {
		return Disabled
	}
	parts := make([]string, len(c.Ports))
	for i, p := range c.Ports {
		parts[i] = p.Name + fieldSep + strconv.Itoa(int(p.Port)) + fieldSep + strconv.FormatBool(p.TLS == Plain)
	}
	return strings.Join(parts, entrySep)
}

// FormatEgress is the annotation value that parses to es.
func FormatEgress(es []Egress) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Name + fieldSep + e.Listen.String() + fieldSep + e.Upstream
	}
	return strings.Join(parts, entrySep)
}

// Config is a pod's mesh configuration.
type Config struct {
	Ingress IngressConfig
	Egress  []Egress
}

// errBothNames: the same setting under both names, with different values.
var errBothNames = errors.New("set under both Cloister's and Contrast's name with different values: keep one")

// FromAnnotations reads a pod's mesh annotations; present says whether it
// has either (and so wants the mesh sidecar).
func FromAnnotations(annotations map[string]string) (cfg Config, present bool, err error) {
	ingress, hasIngress, err := pick(annotations, IngressAnnotation, ContrastIngressAnnotation)
	if err != nil {
		return Config{}, false, err
	}
	egress, hasEgress, err := pick(annotations, EgressAnnotation, ContrastEgressAnnotation)
	if err != nil {
		return Config{}, false, err
	}
	if cfg.Ingress, err = ParseIngress(ingress); err != nil {
		return Config{}, false, fmt.Errorf("annotation %s: %w", IngressAnnotation, err)
	}
	if cfg.Egress, err = ParseEgress(egress); err != nil {
		return Config{}, false, fmt.Errorf("annotation %s: %w", EgressAnnotation, err)
	}
	for _, e := range cfg.Egress {
		for _, in := range cfg.Ingress.Ports {
			if e.Name == in.Name {
				return Config{}, false, fmt.Errorf("the name %s is both an ingress and an egress: names must be unique", e.Name)
			}
		}
	}
	return cfg, hasIngress || hasEgress, nil
}

func pick(annotations map[string]string, ours, contrast string) (string, bool, error) {
	v, ok := annotations[ours]
	c, cok := annotations[contrast]
	if ok && cok && v != c {
		return "", false, fmt.Errorf("annotation %s: %w (%s)", ours, errBothNames, contrast)
	}
	if ok {
		return v, true, nil
	}
	return c, cok, nil
}

// PlainPorts lists the ports not redirected to the proxy; every other
// port goes through it (and needs mTLS unless listed with disableTLS
// false).
func (c IngressConfig) PlainPorts() []uint16 {
	var out []uint16
	for _, p := range c.Ports {
		if p.TLS == Plain {
			out = append(out, p.Port)
		}
	}
	slices.Sort(out)
	return out
}
