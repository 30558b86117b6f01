package realnode

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FakeDevices are the TEE device nodes a real node gets on a machine
// without TEEs, named as their drivers name them: character devices with
// the null device's numbers (1:3), so the device plugins find and hand them
// out, LAS probes them, and a container that opens one gets the null
// device. Nothing here pretends to be a TEE beyond the name: evidence
// stays simulated and labelled insecure.
var FakeDevices = []string{"sgx_enclave", "sgx_provision", "nitro_enclaves", "z90crypt"}

// FakeEPCBytes is the fake EPC a real node's sysfs gives its one NUMA
// node: 1.5 GiB, room for one 1 GiB enclave and not for two.
const FakeEPCBytes = 3 << 29

// FakeEnclaveCPUs and FakeHugepages are the Nitro Enclaves resources the
// fake sysfs gives the Nitro DRA driver: the nitro_enclaves driver's CPU
// pool (ne_cpus) and 2 MiB hugepages reserved for enclaves, 1 GiB.
const (
	FakeEnclaveCPUs = "2-3"
	FakeHugepages   = 512
)

// MakeFakeSys makes a sysfs tree in dir for the device plugins: one NUMA
// node with FakeEPCBytes of SGX EPC, as Linux (5.17 and later) reports it,
// the host's CPUs (hostSys's devices/system/cpu, linked), which the
// Nitro plugin pools, and the Nitro driver's enclave CPU pool and
// hugepages.
func MakeFakeSys(dir, hostSys string) error {
	x86 := filepath.Join(dir, "devices", "system", "node", "node0", "x86")
	if err := os.MkdirAll(x86, 0o755); err != nil { //nolint:gosec // sysfs is world-readable
		return err
	}
	if err := os.WriteFile(filepath.Join(x86, "sgx_total_bytes"), []byte(fmt.Sprintln(FakeEPCBytes)), 0o644); err != nil { //nolint:gosec // world-readable, as sysfs's
		return err
	}
	for rel, content := range map[string]string{
		"module/nitro_enclaves/parameters/ne_cpus":          FakeEnclaveCPUs,
		"kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": fmt.Sprint(FakeHugepages),
	} {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // sysfs is world-readable
			return err
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil { //nolint:gosec // world-readable, as sysfs's
			return err
		}
	}
	cpu := filepath.Join(dir, "devices", "system", "cpu")
	_ = os.Remove(cpu)
	return os.Symlink(filepath.Join(hostSys, "devices", "system", "cpu"), cpu)
}

// MakeFakeDevices creates FakeDevices in dir, mode 0666 as SGX workloads need
// of the SGX devices; existing ones are replaced.
func MakeFakeDevices(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // the fake /dev folder must be readable by the node's pods
		return err
	}
	for _, name := range FakeDevices {
		path := filepath.Join(dir, name)
		_ = os.Remove(path)
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { //nolint:gosec // a constant device number (1, 3)
			return fmt.Errorf("making fake device %s (needs root and a filesystem without nodev): %w", path, err)
		}
		// mknod applies the umask.
		if err := os.Chmod(path, 0o666); err != nil { //nolint:gosec // a fake device node unprivileged enclaves must open, as the real ones
			return err
		}
	}
	return nil
}
