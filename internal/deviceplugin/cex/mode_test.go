package cex

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/deviceplugin/cex/cexfake"
	"github.com/cloister-cc/cloister/internal/deviceplugin/kubelettest"
)

type rig struct {
	kernel  *cexfake.Kernel
	kubelet *kubelettest.Kubelet
	pods    *kubelettest.PodResources
}

// startPlugin runs mode (its roots set to the fake kernel) against a fake
// kubelet. With a rescan interval of an hour, changes must arrive by events.
func startPlugin(tb testing.TB, k *cexfake.Kernel, mode *Mode, rescan time.Duration) *rig {
	tb.Helper()
	mode.SysRoot, mode.DevRoot = k.Sys, k.Dev
	if mode.Overcommit == 0 {
		mode.Overcommit = 1
	}
	if err := mode.Init(); err != nil {
		tb.Fatal(err)
	}
	r := &rig{kernel: k}
	r.kubelet, r.pods = kubelettest.Serve(tb, mode, rescan)
	return r
}

func (r *rig) listed(resource string) string { return r.kubelet.Listed(resource) }

func (r *rig) want(tb testing.TB, resource, want string) time.Duration {
	tb.Helper()
	return r.kubelet.WaitListed(tb, resource, want)
}

func TestOffersTheAPQNsOfItsType(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12, 0x13)
	k.Card(0x0a, "CEX8C", 0x12)
	r := startPlugin(t, k, &Mode{Type: EP11}, time.Hour)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy 05.0013-0:Healthy")
	if regs := r.kubelet.Registrations(); len(regs) != 1 || regs[0].ResourceName != "ibm.com/cex-ep11" ||
		!regs[0].Options.GetGetPreferredAllocationAvailable() {
		t.Errorf("registrations %v: want ibm.com/cex-ep11 with preferred allocation", regs)
	}
}

func TestOvercommitExposesNDevicesPerAPQN(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8C", 0x12, 0x13)
	r := startPlugin(t, k, &Mode{Type: CCA, Overcommit: 3}, time.Hour)
	r.want(t, "ibm.com/cex-cca", "05.0012-0:Healthy 05.0012-1:Healthy 05.0012-2:Healthy 05.0013-0:Healthy 05.0013-1:Healthy 05.0013-2:Healthy")
}

func TestHotPlugOfflineAndUnplugReachKubeletWithin2s(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12)
	r := startPlugin(t, k, &Mode{Type: EP11}, time.Hour)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy")

	k.SetOnline(0x05, 0x12, false)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Unhealthy")
	k.SetOnline(0x05, 0x12, true)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy")

	k.Queue(0x05, 0x20)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy 05.0020-0:Healthy")

	took := map[string]time.Duration{}
	k.Card(0x07, "CEX8P", 0x01)
	took["card plugged"] = r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy 05.0020-0:Healthy 07.0001-0:Healthy")

	k.Write("devices/ap/card07/online", "0")
	took["card offline"] = r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy 05.0020-0:Healthy 07.0001-0:Unhealthy")

	k.Unplug(0x05)
	took["card unplugged"] = r.want(t, "ibm.com/cex-ep11", "07.0001-0:Unhealthy")
	t.Logf("reached ListAndWatch after %v (rescan interval 1 h)", took)
}

func TestAllocateCreatesARestrictedZcryptNode(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12)
	k.Card(0x06, "CEX8P", 0x12)
	r := startPlugin(t, k, &Mode{Type: EP11, Overcommit: 2}, time.Hour)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy 05.0012-1:Healthy 06.0012-0:Healthy 06.0012-1:Healthy")
	c := r.kubelet.Client("ibm.com/cex-ep11")

	resp, err := c.Allocate(context.Background(), allocate("05.0012-1"))
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	if len(cr.Devices) != 1 || cr.Devices[0].HostPath != filepath.Join(k.Dev, "zcrypt_apqn_5_18") ||
		cr.Devices[0].ContainerPath != "/dev/z90crypt" || cr.Devices[0].Permissions != "rw" {
		t.Errorf("device specs %v", cr.Devices)
	}
	if cr.Envs["CEX_APQN"] != "05.0012" {
		t.Errorf("envs %v", cr.Envs)
	}
	node := "devices/virtual/zcrypt/zcrypt_apqn_5_18/"
	zeros := strings.Repeat("0", 64)
	if got := k.Read(node + "apmask"); got != "0x04"+zeros[2:] {
		t.Errorf("apmask %s, want adapter 5 only", got)
	}
	if got := k.Read(node + "aqmask"); got != "0x000020"+zeros[6:] {
		t.Errorf("aqmask %s, want domain 18 only", got)
	}
	if got := k.Read(node + "ioctlmask"); got != "0x"+strings.Repeat("f", 64) {
		t.Errorf("ioctlmask %s, want every ioctl", got)
	}
	if fi, err := os.Stat(filepath.Join(k.Dev, "zcrypt_apqn_5_18")); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("device node: %v %v", fi, err)
	}

	// The APQN's other slot reuses the node.
	if _, err := c.Allocate(context.Background(), allocate("05.0012-0")); err != nil {
		t.Fatal(err)
	}
	if n := k.Created(); n != 1 {
		t.Errorf("%d nodes created, want 1 (reused for the second container)", n)
	}

	_, err = c.Allocate(context.Background(), allocate("05.0012-0", "06.0012-0"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a container can hold one APQN") {
		t.Errorf("two APQNs for one container: %v", err)
	}
}

func allocate(ids ...string) *pluginapi.AllocateRequest {
	return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
}

func TestUnusedZcryptNodesAreRemoved(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12, 0x13)
	k.Card(0x0a, "CEX8C", 0x12)
	// A node of another type's plugin and one nobody knows about.
	k.Mkdir("devices/virtual/zcrypt/zcrypt_apqn_10_18")
	k.Mkdir("devices/virtual/zcrypt/zcrypt_apqn_5_19")
	r := startPlugin(t, k, &Mode{Type: EP11, ReleaseGrace: 100 * time.Millisecond}, 20*time.Millisecond)
	r.want(t, "ibm.com/cex-ep11", "05.0012-0:Healthy 05.0013-0:Healthy")
	c := r.kubelet.Client("ibm.com/cex-ep11")
	if _, err := c.Allocate(context.Background(), allocate("05.0012-0")); err != nil {
		t.Fatal(err)
	}
	r.pods.Assign("ibm.com/cex-ep11", "05.0012-0")

	// The node left from before the plugin started goes after the grace
	// period; the one in use and the other type's stay.
	k.WantDestroyed(t, "zcrypt_apqn_5_19", "unused")
	time.Sleep(300 * time.Millisecond) // several grace periods
	for _, n := range []string{"zcrypt_apqn_5_18", "zcrypt_apqn_10_18"} {
		if _, err := os.Stat(filepath.Join(k.Sys, "devices/virtual/zcrypt", n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}

	// The container ends: its node goes too.
	r.pods.Assign("ibm.com/cex-ep11")
	k.WantDestroyed(t, "zcrypt_apqn_5_18", "released")
}

func TestConfigSetsAreResourcesAndReloadKeepsLastGood(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12, 0x13, 0x14)
	cfgDir := t.TempDir()
	cfg := filepath.Join(cfgDir, "config-sets.yaml")
	writeFile(t, cfg, `
configSets:
- {name: payments, apqns: [{adapter: 5, domain: 18}, {adapter: 9, domain: 1}]}
- {name: ledger, apqns: [{adapter: 5, domain: 19}]}
- {name: elsewhere, machineID: IBM-3931-OTHER, apqns: [{adapter: 5, domain: 20}]}
`)
	sysinfo := filepath.Join(cfgDir, "sysinfo")
	writeFile(t, sysinfo, "Manufacturer: IBM\nType: 3931\nSequence Code: 0000000000012345\n")
	r := startPlugin(t, k, &Mode{Type: EP11, ConfigPath: cfg, SysinfoPath: sysinfo}, time.Hour)
	r.want(t, "ibm.com/cex-ep11-payments", "05.0012-0:Healthy")
	r.want(t, "ibm.com/cex-ep11-ledger", "05.0013-0:Healthy")
	r.want(t, "ibm.com/cex-ep11-elsewhere", "")
	if _, ok := r.kubelet.Devices("ibm.com/cex-ep11"); ok {
		t.Error("with config sets, the plain resource must not be offered")
	}

	// A bad update (duplicate APQN) changes nothing.
	writeFile(t, cfg, `
configSets:
- {name: payments, apqns: [{adapter: 5, domain: 18}, {adapter: 5, domain: 19}]}
- {name: ledger, apqns: [{adapter: 5, domain: 19}]}
`)
	time.Sleep(300 * time.Millisecond)
	if got := r.listed("ibm.com/cex-ep11-payments"); got != "05.0012-0:Healthy" {
		t.Errorf("after a bad update payments = %q", got)
	}
	// A good update applies within 2 s, a new set registering itself.
	writeFile(t, cfg, `
configSets:
- {name: payments, apqns: [{adapter: 5, domain: 18}, {adapter: 5, domain: 20}]}
- {name: audit, apqns: [{adapter: 5, domain: 19}]}
`)
	r.want(t, "ibm.com/cex-ep11-payments", "05.0012-0:Healthy 05.0014-0:Healthy")
	r.want(t, "ibm.com/cex-ep11-audit", "05.0013-0:Healthy")
	r.want(t, "ibm.com/cex-ep11-ledger", "")
}

func writeFile(tb testing.TB, path, content string) {
	tb.Helper()
	// Write and rename, as a ConfigMap update does.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

func TestInitRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "sets.yaml")
	writeFile(t, bad, `{configSets: [{name: a, apqns: [{adapter: 1, domain: 300}]}]}`)
	for _, tc := range []struct {
		mode *Mode
		want string
	}{
		{&Mode{Type: "cex", Overcommit: 1}, `unknown CEX type "cex"`},
		{&Mode{Type: EP11, Overcommit: 0}, "--overcommit must be between 1 and 100"},
		{&Mode{Type: EP11, Overcommit: 101}, "--overcommit must be between 1 and 100"},
		{&Mode{Type: EP11, Overcommit: 1, ConfigPath: bad}, "domain 300: out of range 0..255"},
		{&Mode{Type: EP11, Overcommit: 1, ConfigPath: filepath.Join(dir, "missing")}, "reading config sets (--config-sets)"},
	} {
		if err := tc.mode.Init(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s/%d/%s: Init = %v, want %q", tc.mode.Type, tc.mode.Overcommit, tc.mode.ConfigPath, err, tc.want)
		}
	}
}

// BenchmarkAllocate measures Allocate with zcrypt node creation (the fake
// kernel answers create through inotify, as udev would), p50/p99.
func BenchmarkAllocate(b *testing.B) {
	k := cexfake.New(b)
	domains := make([]int, 200)
	for i := range domains {
		domains[i] = i
	}
	k.Card(0x05, "CEX8P", domains...)
	r := startPlugin(b, k, &Mode{Type: EP11, ReleaseGrace: time.Hour}, time.Hour)
	if _, ok := r.kubelet.WaitFor(5*time.Second, func() bool { d, _ := r.kubelet.Devices("ibm.com/cex-ep11"); return len(d) == 200 }); !ok {
		b.Fatal("devices not listed")
	}
	c := r.kubelet.Client("ibm.com/cex-ep11")
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		// Every call makes a node: destroy the previous ones out of band.
		if i%200 == 0 && i > 0 {
			b.StopTimer()
			for d := range 200 {
				_ = os.RemoveAll(filepath.Join(k.Sys, "devices/virtual/zcrypt", fmt.Sprintf("zcrypt_apqn_5_%d", d)))
				_ = os.Remove(filepath.Join(k.Dev, fmt.Sprintf("zcrypt_apqn_5_%d", d)))
			}
			b.StartTimer()
		}
		start := time.Now()
		if _, err := c.Allocate(context.Background(), allocate(fmt.Sprintf("05.%04x-0", i%200))); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		i++
	}
	kubelettest.ReportPercentiles(b, lat)
}

// BenchmarkHotPlug measures a plugged card reaching ListAndWatch.
func BenchmarkHotPlug(b *testing.B) {
	k := cexfake.New(b)
	r := startPlugin(b, k, &Mode{Type: EP11}, 30*time.Second)
	for i := 0; b.Loop(); i++ {
		a := i % 256
		k.Card(a, "CEX8P", 1)
		if _, ok := r.kubelet.WaitFor(2*time.Second, func() bool { return strings.Contains(r.listed("ibm.com/cex-ep11"), fmt.Sprintf("%02x.0001-0", a)) }); !ok {
			b.Fatal("plugged card not listed within 2 s")
		}
		b.StopTimer()
		k.Unplug(a)
		if _, ok := r.kubelet.WaitFor(2*time.Second, func() bool { return !strings.Contains(r.listed("ibm.com/cex-ep11"), fmt.Sprintf("%02x.0001-0", a)) }); !ok {
			b.Fatal("unplugged card still listed")
		}
		b.StartTimer()
	}
}

func TestPreferredAllocationKeepsOneAPQNAndSpreads(t *testing.T) {
	m := &Mode{}
	avail := []string{"05.0012-0", "05.0013-0", "05.0013-1", "05.0013-2", "05.0012-2"}
	for _, tc := range []struct {
		must []string
		size int
		want []string
	}{
		{nil, 1, []string{"05.0013-0"}},                                        // the APQN with most free slots
		{nil, 2, []string{"05.0013-0", "05.0013-1"}},                           // both from one APQN
		{[]string{"05.0012-2"}, 2, []string{"05.0012-2", "05.0012-0"}},         // kubelet's must-include decides
		{nil, 4, []string{"05.0012-0", "05.0013-0", "05.0013-1", "05.0013-2"}}, // no APQN has 4: Allocate refuses later
	} {
		got, err := m.PreferredAllocation("ibm.com/cex-ep11", avail, tc.must, tc.size)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("must %v size %d: %v %v, want %v", tc.must, tc.size, got, err, tc.want)
		}
	}
}
