package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cloister-cc/cloister/internal/dev/testskip"
	nitromode "github.com/cloister-cc/cloister/internal/deviceplugin/nitro"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
	"github.com/cloister-cc/cloister/internal/las"
)

// As root: the fake devices are real character device nodes that the SGX
// device plugin offers as healthy and LAS's probe accepts; made
// unreadable (chmod 000) LAS reports the "LAS Unhealthy" reason, and
// restored it is ready again.
func TestFakeDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skipf(t, "device nodes need root")
	}
	dir := filepath.Join(t.TempDir(), "dev")
	if err := MakeFakeDevices(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range FakeDevices {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 || st.Mode&0o777 != 0o666 {
			t.Errorf("%s: mode %o, device %d:%d; want a 0666 character device 1:3", name, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	inv, err := (&sgxmode.Mode{DevRoot: dir, Capacity: 3}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	enclaves := inv[sgxmode.ResourceEnclave]
	if len(enclaves) != 3 || !enclaves[0].Healthy || len(inv[sgxmode.ResourceProvision]) != 3 {
		t.Errorf("sgx plugin inventory %+v", inv)
	}
	probe := &las.Probe{DevRoot: dir}
	if err := probe.Check(); err != nil {
		t.Errorf("LAS probe on the fake device: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, "sgx_enclave"), 0); err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(); err == nil || !strings.Contains(err.Error(), "mode 0000") {
		t.Errorf("LAS probe with chmod 000: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, "sgx_enclave"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(); err != nil {
		t.Errorf("LAS probe after restoring 0666: %v", err)
	}
	// Made again over existing ones: replaced, not an error.
	if err := MakeFakeDevices(dir); err != nil {
		t.Error(err)
	}
}

// The fake sysfs gives the SGX plugin FakeEPCBytes and the Nitro plugin
// the host's CPUs; made twice (a node up again), it is the same.
func TestFakeSys(t *testing.T) {
	dir, host := filepath.Join(t.TempDir(), "sys"), t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "devices", "system", "cpu", "cpu0"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := MakeFakeSys(dir, host); err != nil {
			t.Fatal(err)
		}
	}
	if epc, err := sgxmode.ReadEPC(dir); err != nil || epc != FakeEPCBytes {
		t.Errorf("EPC %d %v, want %d", epc, err, FakeEPCBytes)
	}
	if _, err := os.Stat(filepath.Join(dir, "devices", "system", "cpu", "cpu0")); err != nil {
		t.Errorf("the host's CPUs: %v", err)
	}
	nitro := &nitromode.DRA{SysRoot: dir}
	if pool, err := nitro.CPUPool(); err != nil || nitromode.FormatCPUList(pool) != FakeEnclaveCPUs {
		t.Errorf("enclave CPU pool %v %v, want %s", pool, err, FakeEnclaveCPUs)
	}
	if total, size, err := nitro.Hugepages(); err != nil || total != FakeHugepages<<21 || size != 2<<20 {
		t.Errorf("hugepages %d of %d (%v), want %d of 2 MiB", total, size, err, FakeHugepages<<21)
	}
}
