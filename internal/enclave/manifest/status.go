package manifest

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// PluginState is where a user plugin is in its life inside the enclave.
type PluginState string

// The states of a plugin, as Kubernetes names a container's.
const (
	// PluginWaiting: not started yet, or waiting to be restarted.
	PluginWaiting PluginState = "Waiting"
	PluginRunning PluginState = "Running"
	// PluginSucceeded: exited 0 and its restart policy keeps it stopped.
	PluginSucceeded PluginState = "Succeeded"
	// PluginFailed: exited otherwise (or could not start) and its restart
	// policy keeps it stopped.
	PluginFailed PluginState = "Failed"
)

// Status is what the orchestrator reports of the enclave.
type Status struct {
	// Manifest is the digest of the manifest applied (ManifestDigest).
	Manifest string         `json:"manifest"`
	Plugins  []PluginStatus `json:"plugins"`
	// Ports are the plugins' declared ports, and whether each answers
	// inside the enclave.
	Ports []PortStatus `json:"ports,omitempty"`
}

// PortStatus is one declared port of a plugin.
type PortStatus struct {
	Plugin string `json:"plugin"`
	Port   int32  `json:"port"`
	Open   bool   `json:"open"`
}

// PluginStatus is one plugin's.
type PluginStatus struct {
	Name     string      `json:"name"`
	State    PluginState `json:"state"`
	Restarts int         `json:"restarts"`
	// ExitCode is the last exit's, when it exited.
	ExitCode *int      `json:"exitCode,omitempty"`
	Message  string    `json:"message,omitempty"`
	Since    time.Time `json:"since"`
}

// Ready judges an enclave by its plugins, as the kubelet judges a pod by
// its containers: ready when every plugin runs or finished successfully
// for good. The text says why not, naming the plugins.
func (s *Status) Ready() (bool, string) {
	if len(s.Plugins) == 0 {
		return false, "no plugin runs: no manifest applied yet"
	}
	var problems []string
	for _, p := range s.Plugins {
		switch p.State {
		case PluginRunning, PluginSucceeded:
			continue
		case PluginFailed:
			problems = append(problems, fmt.Sprintf("plugin %s failed: %s", p.Name, p.Message))
		default:
			problems = append(problems, fmt.Sprintf("plugin %s is not running: %s", p.Name, p.Message))
		}
	}
	for _, p := range s.Ports {
		if !p.Open {
			problems = append(problems, fmt.Sprintf("port %d of plugin %s does not answer", p.Port, p.Plugin))
		}
	}
	if len(problems) > 0 {
		return false, strings.Join(problems, "; ")
	}
	return true, fmt.Sprintf("%d plugins running or done", len(s.Plugins))
}

// Booted says whether the manifest is applied and every plugin started
// once (or could not start): booting is over, and from then on Ready
// says how the plugins fare.
func (s *Status) Booted() bool {
	if s.Manifest == "" {
		return false
	}
	for _, p := range s.Plugins {
		if p.State == PluginWaiting && p.Restarts == 0 && p.ExitCode == nil && p.Message == MessageStarting {
			return false
		}
	}
	return true
}

// MessageStarting is a plugin's message until it first starts.
const MessageStarting = "starting"

// ManifestDigest identifies a manifest's whole content (BootDigest only
// what the enclave boots with).
func (m *Manifest) ManifestDigest() string {
	return hexSHA256(m.JSON())
}

// The PCRs simulated evidence carries, as Nitro numbers them: 0 the
// enclave image, 1 the kernel and boot ramdisk, 2 the application.
const (
	PCRImage       = 0
	PCRKernel      = 1
	PCRApplication = 2
)

// simKernel stands for the kernel a simulated enclave boots: none.
const simKernel = "cloister-enclave simulation: no kernel, no isolation"

// SimPCRs are the PCRs of a simulated enclave booting m, derived from
// what it boots with (SHA-384, as Nitro's): the image from the boot
// digest, the application from the plugins' names and images. A verifier
// computes them from the manifest it expects.
func (m *Manifest) SimPCRs() map[int][]byte {
	var apps []string
	for _, p := range m.Plugins {
		apps = append(apps, p.Name+"="+p.Image)
	}
	appsJSON, _ := json.Marshal(apps)
	pcr := func(data []byte) []byte { s := sha512.Sum384(data); return s[:] }
	return map[int][]byte{
		PCRImage:       pcr([]byte(m.BootDigest())),
		PCRKernel:      pcr([]byte(simKernel)),
		PCRApplication: pcr(appsJSON),
	}
}
