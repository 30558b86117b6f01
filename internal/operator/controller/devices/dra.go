package devices

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
)

// Under DRA the devices are not the nodes' extended resources but what
// the family's driver publishes in ResourceSlices, and in use is what
// ResourceClaims were allocated of them.

// CountDRA computes the device numbers of a kind whose DRA driver owns
// the devices: on each selected node that has a pool of the driver, its
// capacity is the devices published untainted, used the allocations of
// them, and available the untainted devices still free (a device that
// allows many allocations, as SGX's enclave device, stays free while
// healthy: its capacity, not its count, bounds it).
func CountDRA(driver string, nodes []corev1.Node, sliceList []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim) Counts {
	c := Counts{CapacityPerNode: map[string]int32{}, UsedPerNode: map[string]int32{}, AvailablePerNode: map[string]int32{}}
	published := map[string][]resourceapi.Device{}
	for _, s := range sliceList {
		if s.Spec.Driver == driver && s.Spec.NodeName != nil {
			published[*s.Spec.NodeName] = append(published[*s.Spec.NodeName], s.Spec.Devices...)
		}
	}
	allocated := map[string]map[string]int32{} // pool (the node) -> device -> allocations
	for _, cl := range claims {
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Driver != driver {
				continue
			}
			if allocated[r.Pool] == nil {
				allocated[r.Pool] = map[string]int32{}
			}
			allocated[r.Pool][r.Device]++
		}
	}
	for i := range nodes {
		name := nodes[i].Name
		devs, ok := published[name]
		if !ok {
			continue
		}
		var capacity, used, avail int32
		for _, d := range devs {
			n := allocated[name][d.Name]
			used += n
			if len(d.Taints) > 0 {
				continue
			}
			capacity++
			if n == 0 || (d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations) {
				avail++
			}
		}
		c.CapacityPerNode[name], c.UsedPerNode[name], c.AvailablePerNode[name] = capacity, used, avail
		c.Capacity += capacity
		c.Used += used
		c.Available += avail
		if avail == 0 {
			c.Exhausted = append(c.Exhausted, fmt.Sprintf("%s (%s)", name, driver))
		}
	}
	slices.Sort(c.Exhausted)
	return c
}

// WithMode is spec for a CR of mode: counted from driver's
// ResourceSlices when the mode runs the DRA driver (which then owns the
// devices, in Both too).
func (s Spec) WithMode(mode common.DeviceMode, driver string) Spec {
	_, s.DRA = mode.Runs()
	s.Driver = driver
	return s
}

// SlicesAndClaims reads every ResourceSlice and ResourceClaim.
func SlicesAndClaims(ctx context.Context, r client.Reader) ([]resourceapi.ResourceSlice, []resourceapi.ResourceClaim, error) {
	var s resourceapi.ResourceSliceList
	if err := r.List(ctx, &s); err != nil {
		return nil, nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	var cl resourceapi.ResourceClaimList
	if err := r.List(ctx, &cl); err != nil {
		return nil, nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	return s.Items, cl.Items, nil
}
