package nitro

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The Nitro DRA family: one device whose capacity is the node's enclave
// slots, CPU pool (the driver's ne_cpus over the offline CPUs) and
// hugepages; a claim's container gets the device, CPUs of the pool no
// other claim holds, and its enclave's size.
func TestDRAScanAndPrepare(t *testing.T) {
	dev, sys := t.TempDir(), t.TempDir()
	f := &DRA{DevRoot: dev, SysRoot: sys, Enclaves: 4}
	scan := func() []dra.Device {
		t.Helper()
		devs, err := f.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return devs
	}
	if devs := scan(); len(devs) != 0 {
		t.Fatalf("without /dev/nitro_enclaves: %v", devs)
	}
	writeTree(t, dev, map[string]string{"nitro_enclaves": ""})
	writeTree(t, sys, map[string]string{"devices/system/cpu/offline": "6-7\n"})
	d := scan()[0]
	if c := d.Capacity[CapacityCPUs]; c.Value.Value() != 2 || *d.Attributes[AttrCPUPool].StringValue != "6-7" {
		t.Errorf("the offline CPUs as the pool: %+v", d)
	}
	if _, ok := d.Capacity[CapacityMemory]; ok {
		t.Errorf("memory without hugepages: %+v", d.Capacity)
	}
	writeTree(t, sys, map[string]string{
		"module/nitro_enclaves/parameters/ne_cpus":             "2-5\n",
		"kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "512\n",
		"kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "1\n",
	})
	d = scan()[0]
	cpus, mem, slots := d.Capacity[CapacityCPUs], d.Capacity[CapacityMemory], d.Capacity[CapacityEnclaves]
	if !d.Healthy || !*d.AllowMultipleAllocations || cpus.Value.Value() != 4 || cpus.RequestPolicy.Default.Value() != 2 ||
		*d.Attributes[AttrCPUPool].StringValue != "2-5" || mem.Value.Value() != 2<<30 || mem.RequestPolicy.Default.String() != "512Mi" ||
		*d.Attributes[AttrHugepageSize].IntValue != 1<<30 || slots.Value.Value() != 4 || slots.RequestPolicy.Default.Value() != 1 {
		t.Errorf("ne_cpus and two hugepage sizes: %+v", d)
	}

	held := []dra.Prepared{{Data: map[string]string{"cpus": "2"}}}
	g, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: DeviceEnclaves, Consumed: map[string]int64{CapacityCPUs: 2, CapacityMemory: 1 << 30}}, d, held)
	if err != nil {
		t.Fatal(err)
	}
	if g.Data["cpus"] != "3-4" || !slices.Equal(g.Edits.Env, []string{"NITRO_ENCLAVE_CPUS=3,4", "NITRO_ENCLAVE_CPU_COUNT=2", "NITRO_ENCLAVE_MEMORY_MIB=1024"}) ||
		g.Edits.DeviceNodes[0].Path != "/dev/nitro_enclaves" || g.Edits.DeviceNodes[0].HostPath != filepath.Join(dev, "nitro_enclaves") {
		t.Errorf("grant %+v %v", g, g.Edits.Env)
	}
	held = append(held, dra.Prepared{Data: g.Data})
	if _, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: DeviceEnclaves, Consumed: map[string]int64{CapacityCPUs: 2}}, d, held); err == nil ||
		err.Error() != "the enclave CPU pool 2-5 has 1 CPUs free, the claim takes 2" {
		t.Errorf("more CPUs than the pool has free: %v", err)
	}
}

func TestFormatCPUList(t *testing.T) {
	for in, want := range map[string]string{"": "", "3": "3", "2-3,6": "2-3,6", "6,2,3,4,9-10": "2-4,6,9-10"} {
		cpus, err := ParseCPUList(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatCPUList(cpus); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
