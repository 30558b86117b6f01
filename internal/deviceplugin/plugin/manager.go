package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cloister-cc/cloister/internal/deviceplugin/fswatch"
)

// Defaults of the host paths and timings; every one is a flag.
const (
	DefaultPluginDir      = "/var/lib/kubelet/device-plugins"
	DefaultRescanInterval = 30 * time.Second
	// settle is how long a burst of filesystem events may last before the
	// rescan it causes: a hot-plugged card creates many files at once.
	settle = 50 * time.Millisecond
	// retryRegister paces registration attempts while kubelet is starting.
	retryRegister = 250 * time.Millisecond
)

// Manager runs a Mode's device plugins until its context ends.
type Manager struct {
	Mode      Mode
	PluginDir string
	// RescanInterval is the period of full rescans (and of asking kubelet
	// which devices are in use); filesystem events rescan sooner.
	RescanInterval time.Duration
	// PodResourcesSocket is kubelet's pod-resources API, for the allocated
	// metric and the mode's Releaser; empty skips both.
	PodResourcesSocket string
	// Rescan makes the manager scan when something it cannot watch changed
	// (a reloaded configuration).
	Rescan  <-chan struct{}
	Metrics *Metrics
	Log     *slog.Logger
	// Drain registers no resource with the kubelet, during a migration
	// to DRA: the family's DRA driver owns the devices, and the kubelet
	// hands a pod's limits to DRA only where no plugin serves them. The
	// mode still scans (labelling its node) and releases what the
	// containers that hold devices through the plugin no longer use.
	Drain bool

	mu         sync.Mutex
	servers    map[string]*server
	registered map[string]bool
}

// Run serves until ctx ends, then stops every server and removes its
// socket. It fails only when it cannot start: a missing plugin directory,
// a first scan that fails, a socket another process serves on.
func (m *Manager) Run(ctx context.Context) error {
	if m.Metrics == nil {
		m.Metrics = NewMetrics()
	}
	if m.Log == nil {
		m.Log = slog.New(slog.DiscardHandler)
	}
	if m.RescanInterval <= 0 {
		m.RescanInterval = DefaultRescanInterval
	}
	m.mu.Lock()
	m.servers, m.registered = map[string]*server{}, map[string]bool{}
	m.mu.Unlock()
	if fi, err := os.Stat(m.PluginDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("plugin directory %s (--plugin-dir) must be kubelet's device-plugins directory: it is not a directory", m.PluginDir)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching files: %w", err)
	}
	defer func() { _ = w.Close() }()
	// Watching the directory, not polling, is how a kubelet restart (which
	// removes every socket and creates kubelet.sock anew) is noticed.
	if err := w.Add(m.PluginDir); err != nil {
		return fmt.Errorf("watching %s: %w", m.PluginDir, err)
	}
	defer m.stopAll()

	// Watch before the first scan, so no change between the two is lost.
	watched := fswatch.New(w, m.Log)
	m.rewatch(watched)
	inv, err := m.Mode.Scan(ctx)
	if err != nil {
		return fmt.Errorf("scanning devices: %w", err)
	}
	if m.Drain {
		m.Log.Info("registering no resource: the DRA driver owns the devices")
	} else if err := m.apply(ctx, inv); err != nil {
		return err
	}
	m.registerPending(ctx)

	tick := time.NewTicker(m.RescanInterval)
	defer tick.Stop()
	var settleC, retryC <-chan time.Time
	m.housekeep(ctx)
	for {
		select {
		case <-ctx.Done():
			m.Log.Info("stopping device plugins")
			return nil
		case <-tick.C:
			m.rescan(ctx, watched)
			m.housekeep(ctx)
		case <-m.Rescan:
			m.rescan(ctx, watched)
		case <-settleC:
			settleC = nil
			m.rescan(ctx, watched)
		case <-retryC:
			retryC = nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			if filepath.Dir(ev.Name) != filepath.Clean(m.PluginDir) || watched.Has(m.PluginDir) {
				if settleC == nil {
					settleC = time.After(settle)
				}
			}
			m.pluginDirEvent(ctx, ev)
		case err := <-w.Errors:
			m.Log.Warn("file watcher", "error", err)
		}
		if m.registerPending(ctx) && retryC == nil {
			retryC = time.After(retryRegister)
		}
	}
}

// pluginDirEvent reacts to kubelet restarting: it removes the plugin
// sockets and recreates its own.
func (m *Manager) pluginDirEvent(ctx context.Context, ev fsnotify.Event) {
	if filepath.Dir(ev.Name) != filepath.Clean(m.PluginDir) {
		return
	}
	name := filepath.Base(ev.Name)
	if name == KubeletSocket && ev.Has(fsnotify.Create) {
		m.Log.Info("kubelet socket created; registering again")
		m.mu.Lock()
		clear(m.registered)
		m.mu.Unlock()
		return
	}
	if !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return
	}
	m.mu.Lock()
	var lost *server
	for _, s := range m.servers {
		if filepath.Base(s.socket) == name {
			lost = s
		}
	}
	m.mu.Unlock()
	if lost == nil {
		return
	}
	if _, err := os.Stat(lost.socket); err == nil {
		return // already serving on a new socket
	}
	m.Log.Info("plugin socket removed (kubelet restarted); serving again", "resource", lost.resource)
	lost.stop()
	if err := lost.start(ctx); err != nil {
		m.Log.Error("restarting device plugin", "resource", lost.resource, "error", err)
	}
	m.mu.Lock()
	delete(m.registered, lost.resource)
	m.mu.Unlock()
}

// rescan scans and applies the inventory; a failed scan keeps the last one.
// Watches are renewed before the scan: a path that appears later makes an
// event in a watched parent, and so another rescan.
func (m *Manager) rescan(ctx context.Context, watched *fswatch.Paths) {
	m.rewatch(watched)
	inv, err := m.Mode.Scan(ctx)
	if err != nil {
		m.Log.Warn("scanning devices; keeping the last inventory", "error", err)
		return
	}
	if m.Drain {
		return
	}
	if err := m.apply(ctx, inv); err != nil {
		m.Log.Error("serving devices", "error", err)
	}
}

// apply starts a server for every new resource and updates every list.
// Resources that disappear from the inventory keep serving an empty list:
// kubelet then shows zero instead of stale devices.
func (m *Manager) apply(ctx context.Context, inv Inventory) error {
	m.mu.Lock()
	for name := range m.servers {
		if _, ok := inv[name]; !ok {
			inv[name] = nil
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(inv)) {
		m.mu.Lock()
		s := m.servers[name]
		m.mu.Unlock()
		if s == nil {
			s = newServer(m.PluginDir, name, m.Mode, m.Metrics)
			if err := s.start(ctx); err != nil {
				errs = append(errs, err)
				continue
			}
			m.mu.Lock()
			m.servers[name] = s
			m.mu.Unlock()
			m.Log.Info("serving device plugin", "resource", name, "socket", s.socket)
		}
		if s.update(inv[name]) {
			m.Metrics.setDevices(name, inv[name])
			m.Log.Info("devices changed", "resource", name, "devices", len(inv[name]), "healthy", countHealthy(inv[name]))
		}
	}
	return errors.Join(errs...)
}

func countHealthy(devs []Device) int {
	n := 0
	for _, d := range devs {
		if d.Healthy {
			n++
		}
	}
	return n
}

// rewatch follows the mode's watch paths (cards come and go).
func (m *Manager) rewatch(watched *fswatch.Paths) {
	if wa, ok := m.Mode.(Watcher); ok {
		watched.Follow(wa.WatchPaths())
	}
}

// registerPending registers every server kubelet does not know yet and
// reports whether some still need it.
func (m *Manager) registerPending(ctx context.Context) bool {
	m.mu.Lock()
	var todo []*server
	for name, s := range m.servers {
		if !m.registered[name] {
			todo = append(todo, s)
		}
	}
	m.mu.Unlock()
	if len(todo) == 0 {
		return false
	}
	if _, err := os.Stat(filepath.Join(m.PluginDir, KubeletSocket)); err != nil {
		return false // kubelet.sock's creation will trigger us
	}
	pending := false
	for _, s := range todo {
		err := register(ctx, m.PluginDir, s)
		m.Metrics.setRegistered(s.resource, err == nil)
		if err != nil {
			m.Log.Warn("registering with kubelet; retrying", "resource", s.resource, "error", err)
			pending = true
			continue
		}
		m.Log.Info("registered with kubelet", "resource", s.resource)
		m.mu.Lock()
		m.registered[s.resource] = true
		m.mu.Unlock()
	}
	return pending
}

// housekeep asks kubelet which devices are in use, for the allocated
// metric and the mode's Releaser.
func (m *Manager) housekeep(ctx context.Context) {
	if m.PodResourcesSocket == "" {
		return
	}
	if _, err := os.Stat(m.PodResourcesSocket); err != nil {
		return
	}
	inUse, err := InUse(ctx, m.PodResourcesSocket)
	if err != nil {
		m.Log.Warn("asking kubelet which devices are in use", "error", err)
		return
	}
	m.mu.Lock()
	for name := range m.servers {
		m.Metrics.setAllocated(name, len(inUse[name]))
	}
	m.mu.Unlock()
	if r, ok := m.Mode.(Releaser); ok {
		if err := r.Release(ctx, inUse); err != nil {
			m.Log.Warn("releasing unused devices", "error", err)
		}
	}
}

// Ready reports nil once every resource is registered with kubelet.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.Drain {
		return nil
	}
	if len(m.servers) == 0 {
		return errors.New("no device plugin is serving yet")
	}
	var missing []string
	for name := range m.servers {
		if !m.registered[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("not registered with kubelet: %s", strings.Join(missing, ", "))
	}
	return nil
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	servers := slices.Collect(maps.Values(m.servers))
	m.mu.Unlock()
	for _, s := range servers {
		s.stop()
	}
}
