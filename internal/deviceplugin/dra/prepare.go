package dra

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// PrepareResourceClaims prepares each claim's devices of this driver.
// The helper serializes calls, and the driver's lock covers the rest.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		start := time.Now()
		devs, err := d.prepare(ctx, c)
		d.Metrics.observePrepare(time.Since(start), err)
		if err != nil {
			d.Log.Warn("preparing claim", "claim", c.Namespace+"/"+c.Name, "error", err)
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
	}
	return out, nil
}

func (d *Driver) prepare(ctx context.Context, rc *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	claim := Claim{UID: rc.UID, Namespace: rc.Namespace, Name: rc.Name}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ps, ok := d.ckpt.Prepared[claim.UID]; ok {
		return d.result(ps), nil // the kubelet asks again after a restart
	}
	allocs, err := d.allocations(rc)
	if err != nil {
		return nil, err
	}
	held := d.ckpt.held(claim.UID)
	var granted []Prepared
	undo := func() {
		for _, p := range granted {
			if err := d.unprepareOne(ctx, p, held); err != nil {
				d.Log.Warn("undoing a failed preparation", "claim", claim.String(), "error", err)
			}
		}
	}
	edits := map[string]cdispec.ContainerEdits{}
	for _, a := range allocs {
		dev, ok := d.devices[a.Device]
		switch {
		case !ok:
			undo()
			return nil, fmt.Errorf("device %s of request %s is not on this node any more", a.Device, a.Request)
		case !dev.Healthy:
			undo()
			return nil, fmt.Errorf("device %s of request %s is unhealthy: %s", a.Device, a.Request, dev.Message)
		}
		if err := fits(dev, a, append(held, granted...)); err != nil {
			undo()
			return nil, fmt.Errorf("request %s: %w", a.Request, err)
		}
		g, err := d.Family.Prepare(ctx, claim, a, dev, append(held, granted...))
		if err != nil {
			undo()
			return nil, fmt.Errorf("preparing device %s for request %s: %w", a.Device, a.Request, err)
		}
		name := deviceName(claim.UID, a)
		edits[name] = g.Edits
		granted = append(granted, Prepared{Claim: claim, Allocation: a, CDIDevice: d.cdi.qualified(name), Data: g.Data})
	}
	if err := d.cdi.write(claim.UID, edits); err != nil {
		undo()
		return nil, fmt.Errorf("writing the claim's CDI spec: %w", err)
	}
	d.ckpt.Prepared[claim.UID] = granted
	if err := d.ckpt.write(d.ckptPath); err != nil {
		delete(d.ckpt.Prepared, claim.UID)
		_ = d.cdi.remove(claim.UID)
		undo()
		return nil, fmt.Errorf("recording the prepared claim: %w", err)
	}
	d.Metrics.prepared.Set(float64(len(d.ckpt.Prepared)))
	d.Log.Info("prepared claim", "claim", claim.String(), "devices", len(granted))
	return d.result(granted), nil
}

func (d *Driver) result(ps []Prepared) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(ps))
	for _, p := range ps {
		dev := kubeletplugin.Device{Requests: []string{p.Request}, PoolName: p.Pool, DeviceName: p.Device, CDIDeviceIDs: []string{p.CDIDevice}}
		if p.ShareID != "" {
			id := types.UID(p.ShareID)
			dev.ShareID = &id
		}
		out = append(out, dev)
	}
	return out
}

// allocations are the claim's devices of this driver. Configuration
// meant for this driver is refused: it takes none, and would otherwise
// be silently ignored.
func (d *Driver) allocations(rc *resourceapi.ResourceClaim) ([]Allocation, error) {
	if rc.Status.Allocation == nil {
		return nil, errors.New("the claim is not allocated")
	}
	driver := d.Family.Driver()
	for _, c := range rc.Status.Allocation.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == driver {
			return nil, fmt.Errorf("the claim configures driver %s (opaque parameters): it takes none; remove the config entry", driver)
		}
	}
	var out []Allocation
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Driver != driver {
			continue
		}
		if r.Pool != d.NodeName {
			return nil, fmt.Errorf("request %s was allocated device %s of pool %s; this node's pool is %s", r.Request, r.Device, r.Pool, d.NodeName)
		}
		a := Allocation{Request: r.Request, Pool: r.Pool, Device: r.Device}
		if r.ShareID != nil {
			a.ShareID = string(*r.ShareID)
		}
		for k, q := range r.ConsumedCapacity {
			if a.Consumed == nil {
				a.Consumed = map[string]int64{}
			}
			a.Consumed[string(k)] = q.Value()
		}
		out = append(out, a)
	}
	return out, nil
}

// fits is the driver's own check that dev is not handed out beyond what
// it has, whatever the scheduler decided: a device that allows one
// allocation goes to one claim, and a shared one's consumed capacity
// stays within its capacity.
func fits(dev Device, a Allocation, held []Prepared) error {
	shared := dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
	used := map[string]int64{}
	for _, p := range held {
		if p.Device != a.Device {
			continue
		}
		if !shared {
			return fmt.Errorf("device %s is held by claim %s", a.Device, p.Claim)
		}
		for k, v := range p.Consumed {
			used[k] += v
		}
	}
	for k, c := range dev.Capacity {
		if total := used[string(k)] + a.Consumed[string(k)]; total > c.Value.Value() {
			return fmt.Errorf("device %s has %s of %s; the node's claims would take %d", a.Device, c.Value.String(), k, total)
		}
	}
	return nil
}

// UnprepareResourceClaims undoes what PrepareResourceClaims did; a claim
// it does not know (unprepared already) is no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range claims {
		ps, ok := d.ckpt.Prepared[c.UID]
		if !ok {
			out[c.UID] = nil
			continue
		}
		delete(d.ckpt.Prepared, c.UID)
		held := d.ckpt.held(c.UID)
		var errs []error
		for _, p := range ps {
			if err := d.unprepareOne(ctx, p, held); err != nil {
				errs = append(errs, err)
			}
		}
		if err := d.cdi.remove(c.UID); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			d.ckpt.Prepared[c.UID] = ps // the kubelet asks again
			out[c.UID] = err
			continue
		}
		if err := d.ckpt.write(d.ckptPath); err != nil {
			d.ckpt.Prepared[c.UID] = ps
			out[c.UID] = fmt.Errorf("recording the unprepared claim: %w", err)
			continue
		}
		d.Metrics.prepared.Set(float64(len(d.ckpt.Prepared)))
		d.Log.Info("unprepared claim", "claim", c.Namespace+"/"+c.Name)
		out[c.UID] = nil
	}
	return out, nil
}

func (d *Driver) unprepareOne(ctx context.Context, p Prepared, held []Prepared) error {
	u, ok := d.Family.(Unpreparer)
	if !ok {
		return nil
	}
	if err := u.Unprepare(ctx, p, held); err != nil {
		return fmt.Errorf("unpreparing device %s of claim %s: %w", p.Device, p.Claim, err)
	}
	return nil
}
