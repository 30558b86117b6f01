package cex

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// Overcommit bounds: how many containers may share one APQN (IBM's plugin
// hard-codes 1).
const (
	MinOvercommit = 1
	MaxOvercommit = 100
)

// DefaultReleaseGrace is how long a zcrypt node nobody uses survives: a
// node made by Allocate is not in kubelet's pod-resources list until its
// container starts.
const DefaultReleaseGrace = 2 * time.Minute

// Resource is the resource of a type, or of one of its config sets.
func Resource(t Type, set string) string { return tee.CEXResource(string(t), set) }

// Mode offers the APQNs of one adapter type.
type Mode struct {
	Type       Type
	SysRoot    string
	DevRoot    string
	Overcommit int
	// ConfigPath is the config sets file; empty offers every APQN of Type
	// as one resource. The file is read again whenever it changes; a bad
	// version is logged and the last good one kept.
	ConfigPath   string
	SysinfoPath  string
	ReleaseGrace time.Duration
	// NodeWait bounds how long Allocate waits for udev (default 3 s).
	NodeWait time.Duration
	Log      *slog.Logger

	mu       sync.Mutex
	sets     *configFile
	machine  string
	queues   map[APQN]Queue // as of the last scan
	lastSeen map[string]time.Time
	z        *zcrypt
}

// Init validates the settings and reads the config sets; its errors are
// the plugin's exit message.
func (m *Mode) Init() error {
	if _, err := ParseType(string(m.Type)); err != nil {
		return err
	}
	if m.Overcommit < MinOvercommit || m.Overcommit > MaxOvercommit {
		return fmt.Errorf("overcommit %d is out of range: --overcommit must be between %d and %d", m.Overcommit, MinOvercommit, MaxOvercommit)
	}
	if m.Log == nil {
		m.Log = slog.New(slog.DiscardHandler)
	}
	if m.ReleaseGrace == 0 {
		m.ReleaseGrace = DefaultReleaseGrace
	}
	if m.NodeWait == 0 {
		m.NodeWait = 3 * time.Second
	}
	m.z = &zcrypt{sysRoot: m.SysRoot, devRoot: m.DevRoot, wait: m.NodeWait}
	m.lastSeen = map[string]time.Time{}
	m.machine = machineID(m.SysinfoPath)
	m.sets = &configFile{path: m.ConfigPath, log: m.Log}
	if err := m.sets.load(); err != nil {
		return err
	}
	if err := m.z.supported(); err != nil {
		m.Log.Warn("allocations will fail", "error", err)
	}
	m.Log.Info("cex mode", "type", m.Type, "overcommit", m.Overcommit, "machine", m.machine, "configSets", m.sets.names())
	return nil
}

// Scan offers Overcommit devices per APQN of the type; an offline APQN's
// devices are unhealthy, an unplugged one's are gone.
func (m *Mode) Scan(context.Context) (plugin.Inventory, error) {
	queues, err := ScanAP(m.SysRoot)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sets.reload()
	config := m.sets.cfg
	m.queues = map[APQN]Queue{}
	var all []plugin.Device // without config sets: every APQN of the type
	for _, q := range queues {
		if q.Type == m.Type {
			m.queues[q.APQN] = q
			if config == nil {
				all = append(all, m.devices(q)...)
			}
		}
	}
	inv := plugin.Inventory{}
	if config == nil {
		inv[Resource(m.Type, "")] = all
		return inv, nil
	}
	for _, s := range config.ConfigSets {
		var devs []plugin.Device
		if s.MachineID == "" || s.MachineID == m.machine {
			for _, a := range s.APQNs {
				if q, ok := m.queues[a]; ok {
					devs = append(devs, m.devices(q)...)
				}
			}
		}
		inv[Resource(m.Type, s.Name)] = devs
	}
	return inv, nil
}

func (m *Mode) devices(q Queue) []plugin.Device {
	devs := make([]plugin.Device, m.Overcommit)
	for i := range devs {
		devs[i] = plugin.Device{ID: fmt.Sprintf("%s-%d", q.APQN, i), Healthy: q.Online}
	}
	return devs
}

// parseID reads the APQN back from a device ID (05.0012-3).
func parseID(id string) (APQN, error) {
	var a APQN
	var slot int
	if n, err := fmt.Sscanf(id, "%02x.%04x-%d", &a.Adapter, &a.Domain, &slot); err != nil || n != 3 {
		return a, fmt.Errorf("%w: %q is not a CEX device ID", plugin.ErrInvalid, id)
	}
	return a, nil
}

// WatchPaths follow the AP bus (cards and queues come and go) and the
// config sets file's directory (a ConfigMap update swaps a symlink there).
func (m *Mode) WatchPaths() []string {
	paths := watchPaths(m.SysRoot)
	if m.ConfigPath != "" {
		paths = append(paths, filepath.Dir(m.ConfigPath))
	}
	return paths
}

// Allocate gives the container a zcrypt node restricted to its APQN as
// /dev/z90crypt. A container gets one APQN: masks are sets of adapters and
// of domains, so two APQNs would open their cross product.
func (m *Mode) Allocate(_ context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	var apqn *APQN
	for _, id := range ids {
		a, err := parseID(id)
		if err != nil {
			return nil, err
		}
		if apqn != nil && *apqn != a {
			return nil, fmt.Errorf("%w: a container can hold one APQN, got %s and %s: request %s: 1", plugin.ErrInvalid, *apqn, a, resource)
		}
		apqn = &a
	}
	if apqn == nil {
		return nil, fmt.Errorf("%w: no device requested", plugin.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	name, err := m.z.ensure(*apqn)
	if err != nil {
		return nil, err
	}
	m.lastSeen[name] = time.Now()
	m.Log.Info("allocated", "resource", resource, "apqn", apqn.String(), "node", name)
	return &pluginapi.ContainerAllocateResponse{
		Devices: []*pluginapi.DeviceSpec{{HostPath: m.z.devicePath(name), ContainerPath: "/dev/z90crypt", Permissions: "rw"}},
		Envs:    map[string]string{"CEX_APQN": apqn.String(), "CEX_TYPE": string(m.Type)},
	}, nil
}

// Release destroys the zcrypt nodes of this type's APQNs that no container
// has held for ReleaseGrace (IBM's plugin leaves them behind for ever).
func (m *Mode) Release(_ context.Context, inUse map[string][]string) error {
	used := map[string]bool{}
	for resource, ids := range inUse {
		if resource != Resource(m.Type, "") && !strings.HasPrefix(resource, Resource(m.Type, "")+"-") {
			continue
		}
		for _, id := range ids {
			if a, err := parseID(id); err == nil {
				used[nodeName(a)] = true
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	names, err := m.z.nodes()
	if err != nil {
		return err
	}
	ours := map[string]bool{}
	for a := range m.queues {
		ours[nodeName(a)] = true
	}
	now := time.Now()
	for _, name := range names {
		if !ours[name] {
			continue // another type's plugin, or an unplugged adapter
		}
		seen, known := m.lastSeen[name]
		switch {
		case used[name] || !known:
			m.lastSeen[name] = now
		case now.Sub(seen) >= m.ReleaseGrace:
			if err := m.z.destroy(name); err != nil {
				return err
			}
			delete(m.lastSeen, name)
			m.Log.Info("removed unused zcrypt node", "node", name, "unusedFor", now.Sub(seen).Round(time.Second).String())
		}
	}
	return nil
}

// PreferredAllocation keeps a container on one APQN (its zcrypt node can
// only reach one) and spreads containers: it picks the APQN with the most
// free slots, the one a must-include device names if any.
func (m *Mode) PreferredAllocation(_ string, available, mustInclude []string, size int) ([]string, error) {
	free := map[APQN][]string{}
	var order []APQN
	for _, id := range available {
		a, err := parseID(id)
		if err != nil {
			continue
		}
		if free[a] == nil {
			order = append(order, a)
		}
		free[a] = append(free[a], id)
	}
	var pick *APQN
	for _, id := range mustInclude {
		if a, err := parseID(id); err == nil {
			pick = &a
			break
		}
	}
	if pick == nil {
		for i, a := range order {
			if len(free[a]) >= size && (pick == nil || len(free[a]) > len(free[*pick])) {
				pick = &order[i]
			}
		}
	}
	if pick == nil {
		return available[:min(size, len(available))], nil // no single APQN fits: Allocate will say so
	}
	out := slices.Clone(mustInclude)
	for _, id := range free[*pick] {
		if len(out) >= size {
			break
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}
