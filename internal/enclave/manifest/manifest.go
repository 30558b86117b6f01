// Package manifest owns the enclave manifest: what the orchestrator inside
// a Nitro Enclave runs, derived from a NitroEnclaveDeployment's spec (the
// enclave's size and its user plugins: images, commands, arguments,
// environment, ports, restart policies); its canonical JSON, which the
// enclave pod mounts and syncs into the enclave; and its boot digest,
// which tells the changes that need a new enclave (size, debug mode,
// plugins and their images: what the enclave boots with) from those the
// orchestrator applies in place (commands, arguments, environment, ports,
// restart policies). It is pure.
package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/enclave/channel"
)

// Version is the manifest's schema.
const Version = "cloister.dev/enclave-manifest/v1"

// The enclave's size when the spec leaves it out (the CRD's defaults).
const (
	DefaultCPUs      = 2
	DefaultMemoryMiB = 2048
)

// Manifest is what one enclave runs.
type Manifest struct {
	Version string   `json:"version"`
	Enclave Size     `json:"enclave"`
	Plugins []Plugin `json:"plugins"`
	Egress  []Egress `json:"egress,omitempty"`
}

// Egress is an address in the cluster the plugins reach through the pod
// at a loopback port inside the enclave.
type Egress struct {
	Name    string `json:"name"`
	Port    int32  `json:"port"`
	Address string `json:"address"`
}

// Size is the enclave's: CPUs, memory, debug mode, and the PCRs its
// image file must measure.
type Size struct {
	CPUs      int32 `json:"cpus"`
	MemoryMiB int32 `json:"memoryMiB"`
	Debug     bool  `json:"debug,omitempty"`
	PCRs      *PCRs `json:"pcrs,omitempty"`
}

// PCRs are an enclave image file's measurements (lowercase hex).
type PCRs struct {
	PCR0 string `json:"pcr0"`
	PCR1 string `json:"pcr1"`
	PCR2 string `json:"pcr2"`
}

// Plugin is a user plugin: a container the orchestrator runs.
type Plugin struct {
	Name          string   `json:"name"`
	Image         string   `json:"image"`
	Command       []string `json:"command,omitempty"`
	Args          []string `json:"args,omitempty"`
	Env           []Env    `json:"env,omitempty"`
	Ports         []Port   `json:"ports,omitempty"`
	RestartPolicy string   `json:"restartPolicy"`
}

// Env is a literal environment variable.
type Env struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Port is a port a plugin serves.
type Port struct {
	Name     string `json:"name,omitempty"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
}

// FromSpec derives the manifest of a NitroEnclaveDeployment's spec.
func FromSpec(spec *enclavev1beta1.NitroEnclaveDeploymentSpec) (*Manifest, error) {
	m := &Manifest{Version: Version, Enclave: Size{CPUs: spec.Enclave.CPUs, MemoryMiB: spec.Enclave.MemoryMiB, Debug: spec.Enclave.Debug}}
	if p := spec.Enclave.PCRs; p != nil && !spec.Simulation {
		m.Enclave.PCRs = &PCRs{PCR0: p.PCR0, PCR1: p.PCR1, PCR2: p.PCR2}
	}
	if m.Enclave.CPUs == 0 {
		m.Enclave.CPUs = DefaultCPUs
	}
	if m.Enclave.MemoryMiB == 0 {
		m.Enclave.MemoryMiB = DefaultMemoryMiB
	}
	if len(spec.UserPlugins) == 0 {
		return nil, errors.New("spec.userPlugins: an enclave needs at least one plugin to run")
	}
	for i, up := range spec.UserPlugins {
		p := Plugin{Name: up.Name, Image: up.Image, Command: up.Command, Args: up.Args, RestartPolicy: string(up.RestartPolicy)}
		if p.RestartPolicy == "" {
			p.RestartPolicy = string(corev1.RestartPolicyAlways)
		}
		for _, e := range up.Env {
			if e.ValueFrom != nil {
				return nil, fmt.Errorf("spec.userPlugins[%d] (%s): env %s takes its value from the cluster (valueFrom), which the enclave cannot reach: give it a literal value", i, up.Name, e.Name)
			}
			p.Env = append(p.Env, Env{Name: e.Name, Value: e.Value})
		}
		for _, cp := range up.Ports {
			proto := string(cp.Protocol)
			if proto == "" {
				proto = string(corev1.ProtocolTCP)
			}
			p.Ports = append(p.Ports, Port{Name: cp.Name, Port: cp.ContainerPort, Protocol: proto})
		}
		m.Plugins = append(m.Plugins, p)
	}
	ports := map[int32]string{}
	for _, p := range m.Plugins {
		for _, port := range p.Ports {
			ports[port.Port] = "plugin " + p.Name
		}
	}
	for i, e := range spec.Egress {
		if e.Port == channel.API {
			return nil, fmt.Errorf("spec.egress[%d] (%s): port %d is the orchestrator's; take another", i, e.Name, e.Port)
		}
		if who, ok := ports[e.Port]; ok {
			return nil, fmt.Errorf("spec.egress[%d] (%s): port %d is taken by %s; take another", i, e.Name, e.Port, who)
		}
		if _, _, err := net.SplitHostPort(e.Address); err != nil {
			return nil, fmt.Errorf("spec.egress[%d] (%s): address %q: give HOST:PORT", i, e.Name, e.Address)
		}
		ports[e.Port] = "egress " + e.Name
		m.Egress = append(m.Egress, Egress{Name: e.Name, Port: e.Port, Address: e.Address})
	}
	for _, p := range m.Plugins {
		for _, port := range p.Ports {
			if port.Port == channel.API {
				return nil, fmt.Errorf("plugin %s: port %d is the orchestrator's; take another", p.Name, port.Port)
			}
		}
	}
	return m, nil
}

// JSON is the manifest's canonical encoding: the same spec, the same
// bytes.
func (m *Manifest) JSON() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic("enclave: marshalling a manifest: " + err.Error())
	}
	return append(b, '\n')
}

// Parse reads a manifest, refusing unknown fields and other schemas.
func Parse(data []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("reading the enclave manifest: %w", err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("enclave manifest version %q: this orchestrator reads %s", m.Version, Version)
	}
	return &m, nil
}

// BootDigest identifies what the enclave boots with: its size and its
// plugins' names and images. Two manifests with the same boot digest run
// in the same enclave; any other change is applied in place.
func (m *Manifest) BootDigest() string {
	type boot struct {
		Enclave Size
		Images  [][2]string
		Egress  []Egress `json:",omitempty"`
	}
	b := boot{Enclave: m.Enclave, Egress: m.Egress}
	for _, p := range m.Plugins {
		b.Images = append(b.Images, [2]string{p.Name, p.Image})
	}
	data, _ := json.Marshal(b)
	return hexSHA256(data)
}

func hexSHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
