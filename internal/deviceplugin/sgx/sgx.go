// Package sgx is the device plugin mode for Intel SGX: it offers
// sgx.cloister.dev/enclave and sgx.cloister.dev/provision, backed by the
// in-kernel driver's /dev/sgx_enclave and /dev/sgx_provision, labels
// its node cloister.dev/sgx=true while the enclave device exists, and
// keeps the node's EPC in bytes as the extended resource
// sgx.cloister.dev/epc of its status (epc.go).
package sgx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// Resources and the node label; the operator's SGXPlugin controller reads
// the same names.
const (
	ResourceEnclave   = tee.SGXEnclave
	ResourceProvision = tee.SGXProvision
	Label             = tee.LabelSGX
)

// Capacity bounds (the SGXPlugin's capacitySGXPods).
const (
	MinCapacity = 1
	MaxCapacity = 10000
)

// devices maps each resource to its device node and where containers see it.
// SDKs built for the out-of-tree driver open /dev/sgx/enclave, so the node
// is mapped there too.
var devices = []struct {
	resource, file string
	containerPaths []string
}{
	{ResourceEnclave, "sgx_enclave", []string{"/dev/sgx_enclave", "/dev/sgx/enclave"}},
	{ResourceProvision, "sgx_provision", []string{"/dev/sgx_provision", "/dev/sgx/provision"}},
}

// Mode offers Capacity devices of each resource: how many containers of
// the node may use SGX at once.
type Mode struct {
	DevRoot  string
	Capacity int
	// Label keeps cloister.dev/sgx on the node in step with the enclave
	// device; nil does not label.
	Label *nodelabel.Presence
	// SysRoot is where sysfs is, for the node's EPC (ReadEPC), which EPC
	// keeps in the node's status; nil EPC publishes none.
	SysRoot string
	EPC     *nodelabel.Capacity
	// NoEPC keeps the node's status without EPC: the DRA driver offers
	// it (as its enclave device's capacity) during a migration.
	NoEPC bool
}

// Validate checks the configuration before anything is served.
func (m *Mode) Validate() error {
	if m.Capacity < MinCapacity || m.Capacity > MaxCapacity {
		return fmt.Errorf("capacity %d is out of range: --capacity (capacitySGXPods) must be between %d and %d",
			m.Capacity, MinCapacity, MaxCapacity)
	}
	return nil
}

// Scan offers Capacity devices per resource whose device node exists,
// healthy when it can be opened; a missing node offers none.
func (m *Mode) Scan(ctx context.Context) (plugin.Inventory, error) {
	inv := plugin.Inventory{}
	present := false
	for _, d := range devices {
		path := filepath.Join(m.DevRoot, d.file)
		if _, err := os.Stat(path); err != nil {
			inv[d.resource] = nil
			continue
		}
		if d.resource == ResourceEnclave {
			present = true
		}
		healthy := plugin.Openable(path)
		devs := make([]plugin.Device, m.Capacity)
		for i := range devs {
			devs[i] = plugin.Device{ID: fmt.Sprintf("%s-%d", d.file, i), Healthy: healthy}
		}
		inv[d.resource] = devs
	}
	m.Label.Sync(ctx, present)
	// Without the enclave device no EPC is offered, whatever sysfs says.
	var epc int64
	var err error
	if present && !m.NoEPC {
		epc, err = ReadEPC(m.SysRoot)
	}
	m.EPC.Sync(ctx, epc, err)
	return inv, nil
}

// WatchPaths: device nodes appear and vanish in the device root.
func (m *Mode) WatchPaths() []string { return []string{m.DevRoot} }

// Allocate maps the resource's device node into the container, once
// however many of its devices the container asked for.
func (m *Mode) Allocate(_ context.Context, resource string, _ []string) (*pluginapi.ContainerAllocateResponse, error) {
	for _, d := range devices {
		if d.resource != resource {
			continue
		}
		r := &pluginapi.ContainerAllocateResponse{}
		for _, p := range d.containerPaths {
			r.Devices = append(r.Devices, &pluginapi.DeviceSpec{HostPath: filepath.Join(m.DevRoot, d.file), ContainerPath: p, Permissions: "rw"})
		}
		return r, nil
	}
	return nil, fmt.Errorf("%w: sgx mode does not serve %s", plugin.ErrInvalid, resource)
}
