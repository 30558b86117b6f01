package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// BenchmarkPrepare prepares and unprepares a claim of one device, as the
// kubelet asks: the driver's checks, the family's grant, the claim's CDI
// spec and the checkpoint, each written and synced. It reports the p99
// of a prepare.
func BenchmarkPrepare(b *testing.B) {
	fam := &dirFamily{dir: b.TempDir()}
	if err := os.WriteFile(filepath.Join(fam.dir, "dev-0"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
	d := &Driver{Family: fam, NodeName: "node-a", KubeletDir: b.TempDir(), CDIDir: b.TempDir()}
	if err := d.init(); err != nil {
		b.Fatal(err)
	}
	devs, err := fam.Scan(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	d.setDevices(devs)
	ctx := context.Background()
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		uid := apitypes.UID(fmt.Sprintf("claim-%d", i))
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: uid},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: testDriver, Pool: "node-a", Device: "dev-0"}}}}}}
		start := time.Now()
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{rc})
		times = append(times, time.Since(start))
		if err != nil || res[uid].Err != nil {
			b.Fatal(err, res[uid].Err)
		}
		if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: uid}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs/prepare")
}
