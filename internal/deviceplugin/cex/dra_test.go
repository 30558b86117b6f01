package cex

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/cloister-cc/cloister/internal/deviceplugin/cex/cexfake"
	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
)

func scanDRA(t *testing.T, f *DRA) map[string]dra.Device {
	t.Helper()
	devs, err := f.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return dra.ByName(devs)
}

func attr(d dra.Device, name string) string {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	switch {
	case !ok:
		return "<none>"
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	}
	return "?"
}

// Every APQN of every mode is a device with what selects it: mode, card,
// APQN, master-key pattern; an offline one is unhealthy; with overcommit
// a device is shared by that many claims.
func TestDRAPublishesEveryAPQN(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12, 0x13)
	k.Card(0x06, "CEX7C", 0x12)
	k.Write("devices/ap/card05/05.0012/mkvps", "WK CUR: valid 0x"+strings.Repeat("ab", 32)+"\nWK NEW: empty")
	k.Write("devices/ap/card06/06.0012/mkvps", "AES NEW: empty\nAES CUR: valid 0x8D2E4F0011223344\nAPKA CUR: valid 0x1")
	k.SetOnline(0x05, 0x13, false)
	f := &DRA{SysRoot: k.Sys, DevRoot: k.Dev, Overcommit: 1}
	if err := f.Init(); err != nil {
		t.Fatal(err)
	}
	got := scanDRA(t, f)
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, []string{"apqn-05-0012", "apqn-05-0013", "apqn-06-0012"}) {
		t.Fatalf("devices %v", names)
	}
	ep11 := got["apqn-05-0012"]
	for name, want := range map[string]string{AttrMode: "ep11", AttrAPQN: "05.0012", AttrAdapter: "5", AttrDomain: "18", AttrCardType: "CEX8P",
		AttrGeneration: "cex8", AttrConfigSet: "", AttrMKVPKey: "WK", AttrMKVP: strings.Repeat("ab", 32)} {
		if g := attr(ep11, name); g != want {
			t.Errorf("apqn-05-0012 %s = %q, want %q", name, g, want)
		}
	}
	if !ep11.Healthy || ep11.AllowMultipleAllocations != nil || ep11.Capacity != nil {
		t.Errorf("apqn-05-0012: %+v", ep11)
	}
	if cca := got["apqn-06-0012"]; attr(cca, AttrMode) != "cca" || attr(cca, AttrMKVPKey) != "AES" || attr(cca, AttrMKVP) != "8d2e4f0011223344" {
		t.Errorf("apqn-06-0012: %+v", cca.Attributes)
	}
	if off := got["apqn-05-0013"]; off.Healthy || off.Message != "the card or its queue 05.0013 is offline" || attr(off, AttrMKVP) != "<none>" {
		t.Errorf("apqn-05-0013: %+v", off)
	}

	f.Overcommit = 3
	shared := scanDRA(t, f)["apqn-05-0012"]
	shares := shared.Capacity[CapacityShares]
	if !*shared.AllowMultipleAllocations || shares.Value.Value() != 3 || shares.RequestPolicy.Default.Value() != 1 {
		t.Errorf("overcommit 3: %+v", shared)
	}
	k.Unplug(0x06)
	if _, ok := scanDRA(t, f)["apqn-06-0012"]; ok {
		t.Error("an unplugged card's APQN is still published")
	}
}

// With config sets, only this machine's sets' APQNs are published, each
// naming its set; a changed file is followed, a bad one ignored.
func TestDRAConfigSets(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12, 0x13, 0x14, 0x15)
	dir := t.TempDir()
	cfg, sysinfo := filepath.Join(dir, "config-sets.yaml"), filepath.Join(dir, "sysinfo")
	writeFile(t, sysinfo, "Manufacturer: IBM\nType: 3931\nSequence Code: 0000000000012345\n")
	writeFile(t, cfg, `
configSets:
- {name: payments, apqns: [{adapter: 5, domain: 18}]}
- {name: ledger, machineID: IBM-3931-0000000000012345, apqns: [{adapter: 5, domain: 19}]}
- {name: elsewhere, machineID: IBM-3931-OTHER, apqns: [{adapter: 5, domain: 20}]}
`)
	f := &DRA{SysRoot: k.Sys, DevRoot: k.Dev, Overcommit: 1, ConfigPath: cfg, SysinfoPath: sysinfo}
	if err := f.Init(); err != nil {
		t.Fatal(err)
	}
	sets := func() map[string]string {
		out := map[string]string{}
		for n, d := range scanDRA(t, f) {
			out[n] = attr(d, AttrConfigSet) + "@" + attr(d, AttrMachineID)
		}
		return out
	}
	want := map[string]string{"apqn-05-0012": "payments@IBM-3931-0000000000012345", "apqn-05-0013": "ledger@IBM-3931-0000000000012345"}
	if got := sets(); len(got) != 2 || got["apqn-05-0012"] != want["apqn-05-0012"] || got["apqn-05-0013"] != want["apqn-05-0013"] {
		t.Errorf("config sets: %v, want %v", got, want)
	}
	writeFile(t, cfg, "configSets:\n- {name: payments, apqns: [{adapter: 5, domain: 21}]}\n")
	if got := sets(); len(got) != 1 || got["apqn-05-0015"] != "payments@IBM-3931-0000000000012345" {
		t.Errorf("after the file changed: %v", got)
	}
	writeFile(t, cfg, "configSets:\n- {name: payments, apqns: [{adapter: 5, domain: 300}]}\n")
	if got := sets(); len(got) != 1 || got["apqn-05-0015"] == "" {
		t.Errorf("a bad file must keep the last good sets: %v", got)
	}
	if !slices.Contains(f.WatchPaths(), dir) {
		t.Errorf("watch paths %v lack the config folder", f.WatchPaths())
	}
}

// A claim's containers get a zcrypt node that reaches only its APQN; the
// node goes when the last claim holding it does.
func TestDRAPrepareMakesARestrictedNode(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12)
	f := &DRA{SysRoot: k.Sys, DevRoot: k.Dev, Overcommit: 2}
	if err := f.Init(); err != nil {
		t.Fatal(err)
	}
	dev := scanDRA(t, f)["apqn-05-0012"]
	g, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: dev.Name}, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	node := g.Data["node"]
	if node != "zcrypt_apqn_5_18" || len(g.Edits.DeviceNodes) != 1 || g.Edits.DeviceNodes[0].Path != "/dev/z90crypt" ||
		g.Edits.DeviceNodes[0].HostPath != filepath.Join(k.Dev, node) || !slices.Equal(g.Edits.Env, []string{"CEX_APQN=05.0012", "CEX_TYPE=ep11"}) {
		t.Fatalf("grant %+v", g)
	}
	if got := k.Read("devices/virtual/zcrypt/" + node + "/aqmask"); got != "0x000020"+strings.Repeat("0", 58) {
		t.Errorf("aqmask %s, want domain 18 only", got)
	}
	other := dra.Prepared{Data: map[string]string{"node": node}}
	if err := f.Unprepare(context.Background(), dra.Prepared{Data: g.Data}, []dra.Prepared{other}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(k.Sys, "devices/virtual/zcrypt", node)); err != nil {
		t.Errorf("the node went while another claim holds it: %v", err)
	}
	if err := f.Unprepare(context.Background(), dra.Prepared{Data: g.Data}, nil); err != nil {
		t.Fatal(err)
	}
	k.WantDestroyed(t, node, "the last claim's")
	if _, err := f.Prepare(context.Background(), dra.Claim{}, dra.Allocation{Device: "apqn-5-18"}, dev, nil); err == nil {
		t.Error("a device name that is no APQN was prepared")
	}
}

// A queue's mkvps attribute, as any kernel might write it: a pattern is
// hex of at most 64 digits (an attribute's limit), named by its key.
func FuzzReadMKVP(f *testing.F) {
	f.Add("AES NEW: empty\nAES CUR: valid 0x8D2E4F0011223344\nAPKA CUR: valid 0x1")
	f.Add("WK CUR: valid 0x" + strings.Repeat("ab", 32) + "\nWK NEW: empty")
	f.Add("WK CUR: invalid 0x12")
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(t.TempDir(), "mkvps")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		key, pattern := readMKVP(path)
		if (key == "") != (pattern == "") || len(pattern) > 64 || strings.Trim(pattern, "0123456789abcdef") != "" || strings.Trim(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
			t.Fatalf("%q gave key %q, pattern %q", content, key, pattern)
		}
	})
}
