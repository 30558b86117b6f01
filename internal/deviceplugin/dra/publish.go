package dra

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// publish hands the node's pool to the helper's ResourceSlice controller,
// which creates, updates and deletes the slices to match at once.
func (d *Driver) publish(ctx context.Context) error {
	devs := d.slice()
	var slices []resourceslice.Slice
	for len(devs) > 0 {
		n := min(len(devs), resourceapi.ResourceSliceMaxDevices)
		slices = append(slices, resourceslice.Slice{Devices: devs[:n]})
		devs = devs[n:]
	}
	if len(slices) == 0 {
		slices = []resourceslice.Slice{{}} // the pool stays, empty
	}
	return d.helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{d.NodeName: {Slices: slices}},
	})
}
