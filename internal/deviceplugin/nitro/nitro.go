// Package nitro is the device plugin mode for AWS Nitro Enclaves: it offers
// aws.ec2.nitro/nitro_enclaves backed by /dev/nitro_enclaves and,
// optionally, aws.ec2.nitro/nitro_enclaves_cpus for the CPUs the host took
// offline for enclaves. It labels its node cloister.dev/nitro=true while
// the device exists, so nobody has to label nodes by hand before
// enclave pods schedule.
package nitro

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// Resources, the node label and the enclave bounds.
const (
	ResourceEnclaves = tee.NitroEnclaves
	ResourceCPUs     = tee.NitroCPUs
	Label            = tee.LabelNitro
	MinEnclaves      = 1
	MaxEnclaves      = 4 // Nitro's limit per parent instance
	device           = "nitro_enclaves"
	// EnvCPUs tells a container which offline CPUs it was given.
	EnvCPUs = "NITRO_ENCLAVE_CPUS"
)

// Mode offers Enclaves enclave slots and, when CPUs is set, one device per
// offline CPU.
type Mode struct {
	DevRoot  string
	SysRoot  string
	Enclaves int
	CPUs     bool
	Label    *nodelabel.Presence
}

// Validate checks the settings.
func (m *Mode) Validate() error {
	if m.Enclaves < MinEnclaves || m.Enclaves > MaxEnclaves {
		return fmt.Errorf("enclaves %d is out of range: --enclaves must be between %d and %d (Nitro's limit per instance)",
			m.Enclaves, MinEnclaves, MaxEnclaves)
	}
	return nil
}

func (m *Mode) offlineFile() string {
	return filepath.Join(m.SysRoot, "devices", "system", "cpu", "offline")
}

// Scan offers the enclave slots while /dev/nitro_enclaves exists (healthy
// when it opens) and the offline CPUs.
func (m *Mode) Scan(ctx context.Context) (plugin.Inventory, error) {
	inv := plugin.Inventory{ResourceEnclaves: nil}
	path := filepath.Join(m.DevRoot, device)
	_, err := os.Stat(path)
	present := err == nil
	if present {
		healthy := plugin.Openable(path)
		for i := range m.Enclaves {
			inv[ResourceEnclaves] = append(inv[ResourceEnclaves], plugin.Device{ID: fmt.Sprintf("%s-%d", device, i), Healthy: healthy})
		}
	}
	m.Label.Sync(ctx, present)
	if m.CPUs {
		inv[ResourceCPUs] = nil
		if present {
			b, err := os.ReadFile(m.offlineFile())
			if err != nil && !os.IsNotExist(err) {
				return nil, fmt.Errorf("reading offline CPUs: %w", err)
			}
			cpus, err := ParseCPUList(string(b))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.offlineFile(), err)
			}
			for _, c := range cpus {
				inv[ResourceCPUs] = append(inv[ResourceCPUs], plugin.Device{ID: fmt.Sprintf("cpu-%d", c), Healthy: true})
			}
		}
	}
	return inv, nil
}

// ParseCPUList reads the kernel's CPU list format: "2-3,6".
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// WatchPaths: the device root and the CPU directory.
func (m *Mode) WatchPaths() []string {
	return []string{m.DevRoot, filepath.Dir(m.offlineFile())}
}

// Allocate maps /dev/nitro_enclaves, or names the CPUs in $NITRO_ENCLAVE_CPUS
// for the enclave's CPU pool.
func (m *Mode) Allocate(_ context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	switch resource {
	case ResourceEnclaves:
		return &pluginapi.ContainerAllocateResponse{Devices: []*pluginapi.DeviceSpec{{
			HostPath: filepath.Join(m.DevRoot, device), ContainerPath: "/dev/" + device, Permissions: "rw",
		}}}, nil
	case ResourceCPUs:
		var cpus []int
		for _, id := range ids {
			c, err := strconv.Atoi(strings.TrimPrefix(id, "cpu-"))
			if err != nil {
				return nil, fmt.Errorf("%w: %q is not a CPU device", plugin.ErrInvalid, id)
			}
			cpus = append(cpus, c)
		}
		slices.Sort(cpus)
		s := make([]string, len(cpus))
		for i, c := range cpus {
			s[i] = strconv.Itoa(c)
		}
		return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{EnvCPUs: strings.Join(s, ",")}}, nil
	}
	return nil, fmt.Errorf("%w: nitro mode does not serve %s", plugin.ErrInvalid, resource)
}
