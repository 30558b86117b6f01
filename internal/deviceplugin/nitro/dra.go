package nitro

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// The Nitro DRA driver: its name, its one device, what a claim consumes
// of it and the attributes that describe the node's enclave resources.
const (
	DRADriver = tee.NitroDRADriver
	// DeviceEnclaves is the node's enclave device, shared by its enclaves.
	DeviceEnclaves = "enclaves"
	// CapacityEnclaves counts enclaves (each claim is one), CapacityCPUs
	// the enclave CPU pool's CPUs, CapacityMemory its hugepages' bytes.
	CapacityEnclaves = "enclaves"
	CapacityCPUs     = "cpus"
	CapacityMemory   = "memory"
	AttrCPUPool      = "cpuPool"
	AttrHugepageSize = "hugepageSize"
	// EnvCPUCount and EnvMemoryMiB tell a container its enclave's share;
	// EnvCPUs (as the device plugin) which CPUs of the pool are its.
	EnvCPUCount  = "NITRO_ENCLAVE_CPU_COUNT"
	EnvMemoryMiB = "NITRO_ENCLAVE_MEMORY_MIB"
)

// Defaults a claim takes when it names none: nitro-cli's smallest
// practical enclave.
var (
	DefaultCPUs   = resource.MustParse("2")
	DefaultMemory = resource.MustParse("512Mi")
)

// DRA is the Nitro Enclaves family of DRA drivers: one device per node
// while /dev/nitro_enclaves exists, whose capacity is the node's enclave
// slots, the enclave CPU pool and its hugepages, so that one claim
// states an enclave's whole need and the scheduler never gives a node's
// enclaves more than it has.
type DRA struct {
	DevRoot, SysRoot string
	// Enclaves is how many enclaves the node may run, 1..MaxEnclaves.
	Enclaves int
	// Label keeps cloister.dev/nitro on the node in step with the
	// device, as the plugin does; nil does not label.
	Label *nodelabel.Presence
}

var _ dra.Family = (*DRA)(nil)

// Driver is the driver's name.
func (f *DRA) Driver() string { return DRADriver }

// WatchPaths: the device root, and where the CPU pool is.
func (f *DRA) WatchPaths() []string {
	return []string{f.DevRoot, filepath.Join(f.SysRoot, "devices", "system", "cpu"), filepath.Dir(f.poolParam())}
}

// poolParam is the driver's CPU pool (the allocator sets it); without it
// the offline CPUs are the pool, as the device plugin takes them.
func (f *DRA) poolParam() string {
	return filepath.Join(f.SysRoot, "module", "nitro_enclaves", "parameters", "ne_cpus")
}

// CPUPool is the enclave CPU pool.
func (f *DRA) CPUPool() ([]int, error) {
	for _, p := range []string{f.poolParam(), filepath.Join(f.SysRoot, "devices", "system", "cpu", "offline")} {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the enclave CPU pool: %w", err)
		}
		cpus, err := ParseCPUList(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return cpus, nil
	}
	return nil, nil
}

var hugepageDir = regexp.MustCompile(`^hugepages-(\d+)kB$`)

// Hugepages are the node's reserved hugepages: their bytes, and the
// largest size that has any.
func (f *DRA) Hugepages() (total, size int64, err error) {
	dir := filepath.Join(f.SysRoot, "kernel", "mm", "hugepages")
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		m := hugepageDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		kb, _ := strconv.ParseInt(m[1], 10, 64)
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n < 0 || kb <= 0 || kb > 1<<30 || n > 1<<40/(kb<<10) {
			return 0, 0, fmt.Errorf("%s: %q is not a count of hugepages", filepath.Join(dir, e.Name(), "nr_hugepages"), strings.TrimSpace(string(b)))
		}
		if n > 0 {
			total += n * kb << 10
			size = max(size, kb<<10)
		}
	}
	return total, size, nil
}

// Scan offers the enclave device while /dev/nitro_enclaves exists,
// healthy when it opens.
func (f *DRA) Scan(ctx context.Context) ([]dra.Device, error) {
	path := filepath.Join(f.DevRoot, device)
	_, err := os.Stat(path)
	f.Label.Sync(ctx, err == nil)
	if err != nil {
		return nil, nil
	}
	pool, err := f.CPUPool()
	if err != nil {
		return nil, err
	}
	memory, pageSize, err := f.Hugepages()
	if err != nil {
		return nil, err
	}
	shared, one := true, resource.MustParse("1")
	d := dra.Device{Device: resourceapi.Device{Name: DeviceEnclaves, AllowMultipleAllocations: &shared,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrCPUPool: {StringValue: new(FormatCPUList(pool))}},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityEnclaves: {
			Value:         *resource.NewQuantity(int64(f.Enclaves), resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &one, ValidValues: []resource.Quantity{one}},
		}},
	}, Healthy: plugin.Openable(path)}
	if !d.Healthy {
		d.Message = path + " does not open"
	}
	if n := int64(len(pool)); n > 0 {
		def := *resource.NewQuantity(min(n, DefaultCPUs.Value()), resource.DecimalSI)
		d.Capacity[CapacityCPUs] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n, resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &def, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: new(resource.MustParse("1"))}}}
	}
	if memory > 0 {
		page := *resource.NewQuantity(pageSize, resource.BinarySI)
		def := DefaultMemory.DeepCopy()
		if def.Value() > memory {
			def = page
		}
		d.Attributes[AttrHugepageSize] = resourceapi.DeviceAttribute{IntValue: &pageSize}
		d.Capacity[CapacityMemory] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(memory, resource.BinarySI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &def, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: new(page.DeepCopy()), Step: new(page.DeepCopy())}}}
	}
	return []dra.Device{d}, nil
}

// Prepare maps /dev/nitro_enclaves and gives the enclave the CPUs of the
// pool no other claim on the node holds, as many as its claim consumed.
func (f *DRA) Prepare(_ context.Context, _ dra.Claim, a dra.Allocation, dev dra.Device, held []dra.Prepared) (dra.Grant, error) {
	if a.Device != DeviceEnclaves {
		return dra.Grant{}, fmt.Errorf("the Nitro driver has no device %q", a.Device)
	}
	g := dra.Grant{Edits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/" + device, HostPath: filepath.Join(f.DevRoot, device), Permissions: "rw"}}}}
	want := a.Consumed[CapacityCPUs]
	if want > 0 {
		var pool []int
		if p := dev.Attributes[AttrCPUPool].StringValue; p != nil {
			var err error
			if pool, err = ParseCPUList(*p); err != nil {
				return dra.Grant{}, err
			}
		}
		taken := map[int]bool{}
		for _, h := range held {
			cpus, _ := ParseCPUList(h.Data["cpus"])
			for _, c := range cpus {
				taken[c] = true
			}
		}
		var mine []int
		for _, c := range pool {
			if !taken[c] && int64(len(mine)) < want {
				mine = append(mine, c)
			}
		}
		if int64(len(mine)) < want {
			return dra.Grant{}, fmt.Errorf("the enclave CPU pool %s has %d CPUs free, the claim takes %d", FormatCPUList(pool), len(mine), want)
		}
		list := make([]string, len(mine))
		for i, c := range mine {
			list[i] = strconv.Itoa(c)
		}
		g.Data = map[string]string{"cpus": FormatCPUList(mine)}
		// As the device plugin names them: "2,3".
		g.Edits.Env = append(g.Edits.Env, EnvCPUs+"="+strings.Join(list, ","), EnvCPUCount+"="+strconv.FormatInt(want, 10))
	}
	if mem := a.Consumed[CapacityMemory]; mem > 0 {
		g.Edits.Env = append(g.Edits.Env, EnvMemoryMiB+"="+strconv.FormatInt(mem>>20, 10))
	}
	return g, nil
}

// FormatCPUList writes CPUs as the kernel does: "2-3,6".
func FormatCPUList(cpus []int) string {
	cpus = slices.Clone(cpus)
	slices.Sort(cpus)
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
