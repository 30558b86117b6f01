package sgx

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
)

// The SGX DRA family: the enclave device carries the node's EPC as
// capacity with Gramine's default size per claim, the provision device
// follows its node, a node without EPC or a device that does not open
// is unhealthy, and a claim's container gets the node at both paths
// and its EPC.
func TestDRAScanAndPrepare(t *testing.T) {
	dev, sys := t.TempDir(), t.TempDir()
	f := &DRA{DevRoot: dev, SysRoot: sys}
	scan := func() map[string]dra.Device {
		t.Helper()
		devs, err := f.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return dra.ByName(devs)
	}
	if got := scan(); len(got) != 0 {
		t.Fatalf("no device nodes: %v", got)
	}
	for _, n := range []string{"sgx_enclave", "sgx_provision"} {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := scan()
	if e := got[DeviceEnclave]; e.Healthy || e.Message != "the node reports no EPC (sgx_total_bytes)" || e.Capacity != nil {
		t.Errorf("enclave without EPC: %+v", e)
	}
	if p := got[DeviceProvision]; !p.Healthy || p.Capacity != nil || !*p.AllowMultipleAllocations || *p.Attributes[AttrType].StringValue != DeviceProvision {
		t.Errorf("provision: %+v", p)
	}
	x86 := filepath.Join(sys, "devices", "system", "node", "node0", "x86")
	if err := os.MkdirAll(x86, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x86, "sgx_total_bytes"), []byte("1610612736\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := scan()[DeviceEnclave]
	epc := e.Capacity[CapacityEPC]
	if !e.Healthy || !*e.AllowMultipleAllocations || *e.Attributes[AttrType].StringValue != DeviceEnclave || epc.Value.Value() != 1610612736 || epc.RequestPolicy.Default.String() != "256Mi" ||
		epc.RequestPolicy.ValidRange.Step.Value() != 4096 {
		t.Errorf("enclave with 1.5 GiB of EPC: %+v", e)
	}
	if err := os.Chmod(filepath.Join(dev, "sgx_enclave"), 0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if e := scan()[DeviceEnclave]; e.Healthy || e.Message != filepath.Join(dev, "sgx_enclave")+" does not open" {
			t.Errorf("a device that does not open: %+v", e)
		}
	}

	g, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: DeviceEnclave, Consumed: map[string]int64{CapacityEPC: 1 << 30}}, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, n := range g.Edits.DeviceNodes {
		if n.HostPath != filepath.Join(dev, "sgx_enclave") || n.Permissions != "rw" {
			t.Errorf("device node %+v", n)
		}
		paths = append(paths, n.Path)
	}
	if !slices.Equal(paths, []string{"/dev/sgx_enclave", "/dev/sgx/enclave"}) || !slices.Equal(g.Edits.Env, []string{"SGX_EPC_BYTES=1073741824"}) {
		t.Errorf("enclave grant: %v %v", paths, g.Edits.Env)
	}
	if g, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: DeviceProvision}, dra.Device{}, nil); err != nil || len(g.Edits.DeviceNodes) != 2 || g.Edits.Env != nil {
		t.Errorf("provision grant: %+v %v", g, err)
	}
	if _, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: "other"}, dra.Device{}, nil); err == nil {
		t.Error("an unknown device was prepared")
	}
}
