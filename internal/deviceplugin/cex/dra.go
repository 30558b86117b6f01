package cex

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
)

// The CEX DRA driver's name and its devices' attributes: what a claim's
// CEL selectors and a DeviceClass per config set match on.
const (
	DRADriver = tee.CEXDRADriver
	// AttrMode is ep11, cca or accel.
	AttrMode    = "mode"
	AttrAPQN    = "apqn"
	AttrAdapter = "adapter"
	AttrDomain  = "domain"
	// AttrCardType is the card's model as the AP bus says it (CEX8P).
	AttrCardType   = "cardType"
	AttrGeneration = "generation"
	// AttrConfigSet is the config set the APQN belongs to on this machine.
	AttrConfigSet = "configSet"
	AttrMachineID = "machineID"
	// AttrMKVP is the verification pattern of the queue's current master
	// key (AES for CCA, the wrapping key for EP11) where the kernel
	// shows it; AttrMKVPKey names that key.
	AttrMKVP    = "mkvp"
	AttrMKVPKey = "mkvpKey"
	// CapacityShares is how many claims may share one APQN (overcommit).
	CapacityShares = "shares"
)

// DRA is the CryptoExpress family of DRA drivers: every APQN of the node
// a device of its own, with its mode, card, config set and master-key
// pattern as attributes, and a zcrypt node restricted to it for each
// claim's containers as /dev/z90crypt.
type DRA struct {
	SysRoot, DevRoot string
	// ConfigPath is the config sets file: with one, only the APQNs of
	// this machine's sets are published, each naming its set.
	ConfigPath  string
	SysinfoPath string
	// Overcommit is how many claims may share an APQN, 1..MaxOvercommit.
	Overcommit int
	// NodeWait bounds how long Prepare waits for udev (default 3 s).
	NodeWait time.Duration
	Log      *slog.Logger

	mu      sync.Mutex
	sets    *configFile
	machine string
	z       *zcrypt
}

var _ dra.Family = (*DRA)(nil)

// Init checks the settings and reads the config sets.
func (f *DRA) Init() error {
	if f.Overcommit < MinOvercommit || f.Overcommit > MaxOvercommit {
		return fmt.Errorf("overcommit %d is out of range: --overcommit must be between %d and %d", f.Overcommit, MinOvercommit, MaxOvercommit)
	}
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
	}
	f.z = &zcrypt{sysRoot: f.SysRoot, devRoot: f.DevRoot, wait: f.NodeWait}
	if f.z.wait == 0 {
		f.z.wait = 3 * time.Second
	}
	f.machine = machineID(f.SysinfoPath)
	f.sets = &configFile{path: f.ConfigPath, log: f.Log}
	if err := f.sets.load(); err != nil {
		return err
	}
	if err := f.z.supported(); err != nil {
		f.Log.Warn("claims will fail to prepare", "error", err)
	}
	return nil
}

// Driver is the driver's name.
func (f *DRA) Driver() string { return DRADriver }

// WatchPaths follow the AP bus and the config sets file's folder.
func (f *DRA) WatchPaths() []string {
	paths := watchPaths(f.SysRoot)
	if f.ConfigPath != "" {
		paths = append(paths, filepath.Dir(f.ConfigPath))
	}
	return paths
}

// DeviceName is an APQN's device: apqn-05-0012.
func DeviceName(a APQN) string { return fmt.Sprintf("apqn-%02x-%04x", a.Adapter, a.Domain) }

// Scan publishes the node's APQNs (those of this machine's config sets
// when there are sets); an offline one is unhealthy.
func (f *DRA) Scan(context.Context) ([]dra.Device, error) {
	queues, err := ScanAP(f.SysRoot)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sets.reload()
	cfg := f.sets.cfg
	f.mu.Unlock()
	setOf := map[APQN]string{}
	if cfg != nil {
		for _, s := range cfg.ConfigSets {
			if s.MachineID != "" && s.MachineID != f.machine {
				continue
			}
			for _, a := range s.APQNs {
				setOf[a] = s.Name
			}
		}
	}
	var out []dra.Device
	for _, q := range queues {
		set, inSet := setOf[q.APQN]
		if cfg != nil && !inSet {
			continue
		}
		out = append(out, f.device(q, set))
	}
	return out, nil
}

func (f *DRA) device(q Queue, set string) dra.Device {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	num := func(n int) resourceapi.DeviceAttribute {
		v := int64(n)
		return resourceapi.DeviceAttribute{IntValue: &v}
	}
	card := readLine(filepath.Join(apDir(f.SysRoot), fmt.Sprintf("card%02x", q.Adapter), "type"))
	d := dra.Device{Device: resourceapi.Device{Name: DeviceName(q.APQN), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrMode: str(string(q.Type)), AttrAPQN: str(q.String()), AttrAdapter: num(q.Adapter), AttrDomain: num(q.Domain),
		AttrCardType: str(card), AttrGeneration: str(q.Gen), AttrConfigSet: str(set), AttrMachineID: str(f.machine),
	}}, Healthy: q.Online}
	if !q.Online {
		d.Message = "the card or its queue " + q.String() + " is offline"
	}
	if key, mkvp := readMKVP(filepath.Join(apDir(f.SysRoot), fmt.Sprintf("card%02x", q.Adapter), q.String(), "mkvps")); mkvp != "" {
		d.Attributes[AttrMKVPKey], d.Attributes[AttrMKVP] = str(key), str(mkvp)
	}
	if f.Overcommit > 1 {
		shared, one := true, resource.MustParse("1")
		d.AllowMultipleAllocations = &shared
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityShares: {
			Value:         *resource.NewQuantity(int64(f.Overcommit), resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &one, ValidValues: []resource.Quantity{one}},
		}}
	}
	return d
}

// mkvpLine is a current, valid master key's line of a queue's mkvps
// attribute: "AES CUR: valid 0x8d2e...".
var mkvpLine = regexp.MustCompile(`^([A-Z0-9]+) CUR: valid 0x([0-9a-fA-F]{2,64})$`)

// readMKVP is the first current, valid master key's name and pattern of
// a queue's mkvps attribute; empty where the kernel has none.
func readMKVP(path string) (key, pattern string) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 4096 {
		return "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m := mkvpLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			return m[1], strings.ToLower(m[2])
		}
	}
	return "", ""
}

// parseDeviceName reads the APQN back from a device's name.
func parseDeviceName(name string) (APQN, error) {
	var a APQN
	if n, err := fmt.Sscanf(name, "apqn-%02x-%04x", &a.Adapter, &a.Domain); err != nil || n != 2 || DeviceName(a) != name {
		return a, fmt.Errorf("%q is not a CEX device", name)
	}
	return a, nil
}

// Prepare gives the claim's containers a zcrypt node restricted to the
// device's APQN, as /dev/z90crypt.
func (f *DRA) Prepare(_ context.Context, _ dra.Claim, a dra.Allocation, dev dra.Device, _ []dra.Prepared) (dra.Grant, error) {
	apqn, err := parseDeviceName(a.Device)
	if err != nil {
		return dra.Grant{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name, err := f.z.ensure(apqn)
	if err != nil {
		return dra.Grant{}, err
	}
	mode := ""
	if m := dev.Attributes[AttrMode].StringValue; m != nil {
		mode = *m
	}
	return dra.Grant{
		Edits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/z90crypt", HostPath: f.z.devicePath(name), Permissions: "rw"}},
			Env:         []string{"CEX_APQN=" + apqn.String(), "CEX_TYPE=" + mode},
		},
		Data: map[string]string{"node": name},
	}, nil
}

// Unprepare destroys the claim's zcrypt node once no other claim holds it.
func (f *DRA) Unprepare(_ context.Context, p dra.Prepared, held []dra.Prepared) error {
	name := p.Data["node"]
	if !strings.HasPrefix(name, nodePrefix) {
		return nil
	}
	for _, h := range held {
		if h.Data["node"] == name {
			return nil
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Stat(f.z.nodeDir(name)); os.IsNotExist(err) {
		return nil // gone with its card
	}
	return f.z.destroy(name)
}
