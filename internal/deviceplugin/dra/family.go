// Package dra serves one family of Cloister's DRA drivers (SGX,
// CryptoExpress, Nitro Enclaves) to the kubelet, on
// k8s.io/dynamic-resource-allocation's kubeletplugin helper. It owns what
// every family needs alike: publishing the node's devices as
// ResourceSlices, rescanning on a timer, on file events and when asked,
// tainting and reporting unhealthy devices (the kubelet shows it in the
// pod's status), and preparing claims — a CDI spec per claim, a
// checkpoint so that a restarted driver unprepares what its predecessor
// prepared, and a last check that no device is handed out beyond what it
// has — so that a family only says which devices exist and what a
// container gets for one.
package dra

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Device is one device of the node as a family scans it.
type Device struct {
	resourceapi.Device
	// Healthy devices can be allocated; an unhealthy one is tainted in
	// its ResourceSlice and reported so to the kubelet, with Message.
	Healthy bool
	Message string
}

// ByName indexes a scan by device name.
func ByName(devs []Device) map[string]Device {
	out := make(map[string]Device, len(devs))
	for _, d := range devs {
		out[d.Name] = d
	}
	return out
}

// Grant is what a container gets for one allocated device: its CDI
// edits, and what the family must remember to undo it (Unpreparer).
type Grant struct {
	Edits cdispec.ContainerEdits
	Data  map[string]string
}

// Family is one kind of hardware.
type Family interface {
	// Driver is the DRA driver's name: the ResourceSlices' spec.driver,
	// the attributes' domain and the CDI vendor.
	Driver() string
	// Scan lists the node's devices now.
	Scan(ctx context.Context) ([]Device, error)
	// Prepare says what a container of the claim gets for dev, allocated
	// to it as a; held lists what the node's other claims were given.
	Prepare(ctx context.Context, claim Claim, a Allocation, dev Device, held []Prepared) (Grant, error)
}

// Watcher is a Family whose devices change with files: the driver
// rescans within a moment of a change directly inside one of these
// paths, asked for again after every scan.
type Watcher interface {
	WatchPaths() []string
}

// Unpreparer is a Family that must undo a grant once no claim holds it;
// held lists what the node's remaining claims were given.
type Unpreparer interface {
	Unprepare(ctx context.Context, p Prepared, held []Prepared) error
}
