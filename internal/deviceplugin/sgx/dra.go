package sgx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// The SGX DRA driver: its name, its devices, and the capacity a claim
// asks EPC by.
const (
	DRADriver       = tee.SGXDRADriver
	DeviceEnclave   = "enclave"
	DeviceProvision = "provision"
	CapacityEPC     = "epc"
	// AttrType is enclave or provision: what DeviceClasses select by.
	AttrType = "type"
	// EnvEPC tells a container the EPC its claim was allocated, in bytes.
	EnvEPC = "SGX_EPC_BYTES"
)

// DefaultEPCRequest is the EPC a claim that names none takes: Gramine's
// default enclave size.
var DefaultEPCRequest = resource.MustParse("256Mi")

// epcPage is the EPC's page: requests are rounded up to whole pages.
var epcPage = resource.MustParse("4Ki")

// DRA is the SGX family of DRA drivers: the enclave device, shared by
// every enclave of the node, with the node's EPC as capacity each claim
// consumes part of (so two claims never get more EPC than the node has),
// and the provision device.
type DRA struct {
	DevRoot, SysRoot string
	// Label keeps cloister.dev/sgx on the node in step with the enclave
	// device, as the plugin does; nil does not label.
	Label *nodelabel.Presence
	// EPC is the node status's sgx.cloister.dev/epc, which the driver
	// keeps at none: the EPC is its enclave device's capacity, and a
	// value the device plugin left would let pods' limits take it twice.
	EPC *nodelabel.Capacity
}

var _ dra.Family = (*DRA)(nil)

// Driver is the driver's name.
func (f *DRA) Driver() string { return DRADriver }

// WatchPaths: the device nodes come and go in the device root.
func (f *DRA) WatchPaths() []string { return []string{f.DevRoot} }

// Scan offers the enclave device while /dev/sgx_enclave exists (healthy
// when it opens and the node has EPC) and the provision device while
// /dev/sgx_provision does.
func (f *DRA) Scan(ctx context.Context) ([]dra.Device, error) {
	_, err := os.Stat(filepath.Join(f.DevRoot, "sgx_enclave"))
	f.Label.Sync(ctx, err == nil)
	f.EPC.Sync(ctx, 0, nil)
	var out []dra.Device
	shared := true
	for _, d := range devices {
		path := filepath.Join(f.DevRoot, d.file)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		dev := dra.Device{Device: resourceapi.Device{AllowMultipleAllocations: &shared}, Healthy: plugin.Openable(path)}
		if !dev.Healthy {
			dev.Message = path + " does not open"
		}
		switch d.resource {
		case ResourceEnclave:
			dev.Name = DeviceEnclave
			dev.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrType: {StringValue: new(DeviceEnclave)}}
			epc, err := ReadEPC(f.SysRoot)
			if err != nil {
				return nil, err
			}
			if epc == 0 {
				// No capacity to consume: tainted, and no claim that
				// asks for EPC matches it.
				if dev.Healthy {
					dev.Healthy, dev.Message = false, "the node reports no EPC (sgx_total_bytes)"
				}
				break
			}
			def := DefaultEPCRequest.DeepCopy()
			if epc < def.Value() {
				def = epcPage.DeepCopy() // the default must fit what there is
			}
			dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityEPC: {
				Value: *resource.NewQuantity(epc, resource.BinarySI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &def,
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: new(epcPage.DeepCopy()), Step: new(epcPage.DeepCopy())}},
			}}
		case ResourceProvision:
			dev.Name = DeviceProvision
			dev.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrType: {StringValue: new(DeviceProvision)}}
		}
		out = append(out, dev)
	}
	return out, nil
}

// Prepare maps the device node (at both of its container paths) and
// tells the container its EPC.
func (f *DRA) Prepare(_ context.Context, _ dra.Claim, a dra.Allocation, _ dra.Device, _ []dra.Prepared) (dra.Grant, error) {
	var g dra.Grant
	for _, d := range devices {
		name := DeviceEnclave
		if d.resource == ResourceProvision {
			name = DeviceProvision
		}
		if name != a.Device {
			continue
		}
		for _, p := range d.containerPaths {
			g.Edits.DeviceNodes = append(g.Edits.DeviceNodes, &cdispec.DeviceNode{Path: p, HostPath: filepath.Join(f.DevRoot, d.file), Permissions: "rw"})
		}
		if name == DeviceEnclave {
			g.Edits.Env = []string{EnvEPC + "=" + strconv.FormatInt(a.Consumed[CapacityEPC], 10)}
		}
		return g, nil
	}
	return g, fmt.Errorf("the SGX driver has no device %q", a.Device)
}
