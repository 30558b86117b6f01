package dra

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// healthResend is how often health is reported without a change: well
// within the kubelet's 30 s before it calls a device's health unknown.
const healthResend = 10 * time.Second

// WatchHealthStatus reports every device's health to the kubelet at
// once, on every change and every healthResend.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(healthResend)
	defer tick.Stop()
	for {
		report, changed := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

func (d *Driver) healthReport() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var r kubeletplugin.DeviceHealthReport
	for _, dev := range d.devices {
		h := kubeletplugin.DeviceHealth{PoolName: d.NodeName, DeviceName: dev.Name, Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: 3 * healthResend}
		if !dev.Healthy {
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, dev.Message
		}
		r.Devices = append(r.Devices, h)
	}
	// A device a claim holds that is gone (a card pulled) is unhealthy to
	// the pods that hold it, not silently forgotten.
	gone := map[string]bool{}
	for _, ps := range d.ckpt.Prepared {
		for _, p := range ps {
			if _, ok := d.devices[p.Device]; !ok && !gone[p.Device] {
				gone[p.Device] = true
				r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{PoolName: p.Pool, DeviceName: p.Device, Health: kubeletplugin.HealthStatusUnhealthy,
					LastUpdated: now, HealthCheckTimeout: 3 * healthResend, Message: "the device is no longer on the node"})
			}
		}
	}
	slices.SortFunc(r.Devices, func(a, b kubeletplugin.DeviceHealth) int { return strings.Compare(a.DeviceName, b.DeviceName) })
	return r, d.changed
}
