package devices

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// Under DRA a node's devices are its driver's published, untainted ones;
// an exclusive device allocated is used up, a shared one stays free; a
// node whose pool has nothing free is exhausted; a node without a pool
// of the driver is not served; other drivers' slices and claims do not
// count.
func TestCountDRA(t *testing.T) {
	shared := true
	node := func(n string) corev1.Node { return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	slice := func(driver, n string, devs ...resourceapi.Device) resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &n, Devices: devs}}
	}
	dev := func(name string, taint bool) resourceapi.Device {
		d := resourceapi.Device{Name: name}
		if taint {
			d.Taints = []resourceapi.DeviceTaint{{Key: "cloister.dev/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		return d
	}
	claim := func(driver, pool, device string) resourceapi.ResourceClaim {
		return resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: driver, Pool: pool, Device: device}}}}}}
	}
	const drv = "cex.cloister.dev"
	c := CountDRA(drv,
		[]corev1.Node{node("a"), node("b"), node("c"), node("d")},
		[]resourceapi.ResourceSlice{
			slice(drv, "a", dev("apqn-05-0012", false), dev("apqn-05-0013", false), dev("apqn-06-0012", true)),
			slice(drv, "b", dev("apqn-05-0012", false)),
			slice(drv, "c", resourceapi.Device{Name: "enclave", AllowMultipleAllocations: &shared}),
			slice("sgx.cloister.dev", "d", dev("enclave", false)),
		},
		[]resourceapi.ResourceClaim{claim(drv, "a", "apqn-05-0012"), claim(drv, "b", "apqn-05-0012"),
			claim(drv, "c", "enclave"), claim(drv, "c", "enclave"), claim("sgx.cloister.dev", "a", "apqn-05-0013"), {}},
	)
	want := map[string][3]int32{"a": {2, 1, 1}, "b": {1, 1, 0}, "c": {1, 2, 1}}
	for n, w := range want {
		if got := [3]int32{c.CapacityPerNode[n], c.UsedPerNode[n], c.AvailablePerNode[n]}; got != w {
			t.Errorf("node %s: capacity, used, available %v, want %v", n, got, w)
		}
	}
	if _, ok := c.CapacityPerNode["d"]; ok || c.Capacity != 4 || c.Used != 4 || c.Available != 2 {
		t.Errorf("totals %+v", c)
	}
	if len(c.Exhausted) != 1 || c.Exhausted[0] != "b (cex.cloister.dev)" {
		t.Errorf("exhausted %v", c.Exhausted)
	}
	if s := (Spec{}).WithMode(common.DeviceModeBoth, drv); !s.DRA || s.Driver != drv {
		t.Errorf("in Both the driver owns the devices: %+v", s)
	}
	if s := (Spec{}).WithMode("", drv); s.DRA {
		t.Error("the default mode is the device plugin's")
	}
}
