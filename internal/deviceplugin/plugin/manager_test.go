package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/deviceplugin/kubelettest"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

const resource = "example.cloister.dev/widget"

// fileMode offers one device per file in dir; a file reading "bad" is an
// unhealthy device.
type fileMode struct {
	dir string

	mu       sync.Mutex
	released []map[string][]string
}

func (f *fileMode) Scan(context.Context) (plugin.Inventory, error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, err
	}
	var devs []plugin.Device
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(f.dir, e.Name()))
		devs = append(devs, plugin.Device{ID: e.Name(), Healthy: strings.TrimSpace(string(b)) != "bad"})
	}
	return plugin.Inventory{resource: devs}, nil
}

func (f *fileMode) Allocate(_ context.Context, _ string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	r := &pluginapi.ContainerAllocateResponse{}
	for _, id := range ids {
		if id == "refuse" {
			return nil, fmt.Errorf("%w: refused", plugin.ErrInvalid)
		}
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{HostPath: filepath.Join(f.dir, id), ContainerPath: "/dev/" + id, Permissions: "rw"})
	}
	return r, nil
}

func (f *fileMode) WatchPaths() []string { return []string{f.dir} }

// PreferredAllocation prefers the highest IDs, so a test can tell it ran.
func (f *fileMode) PreferredAllocation(_ string, available, must []string, size int) ([]string, error) {
	out := slices.Clone(must)
	rest := slices.Clone(available)
	slices.Sort(rest)
	slices.Reverse(rest)
	for _, id := range rest {
		if len(out) == size {
			break
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

func (f *fileMode) Release(_ context.Context, inUse map[string][]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, inUse)
	return nil
}

// shortDir is a temp dir with a path short enough for unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

type rig struct {
	pluginDir, devDir string
	mode              *fileMode
	manager           *plugin.Manager
	kubelet           *kubelettest.Kubelet
	done              chan error
	cancel            context.CancelFunc
}

func start(t *testing.T, devices ...string) *rig {
	t.Helper()
	r := &rig{pluginDir: shortDir(t), devDir: t.TempDir(), done: make(chan error, 1)}
	for _, d := range devices {
		write(t, filepath.Join(r.devDir, d), "ok")
	}
	r.kubelet = kubelettest.Start(t, r.pluginDir)
	r.mode = &fileMode{dir: r.devDir}
	r.manager = &plugin.Manager{Mode: r.mode, PluginDir: r.pluginDir, RescanInterval: time.Hour}
	r.run(t)
	return r
}

func (r *rig) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.manager.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
}

func (r *rig) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- nil
	case <-time.After(10 * time.Second):
		t.Error("Run did not return after cancel")
	}
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) waitDevices(t *testing.T, want string) time.Duration {
	t.Helper()
	took, ok := r.kubelet.WaitFor(2*time.Second, func() bool { return listed(r.kubelet) == want })
	if !ok {
		t.Fatalf("ListAndWatch shows %q after 2 s, want %q", listed(r.kubelet), want)
	}
	return took
}

// listed renders the last ListAndWatch answer as "id:Health ...".
func listed(k *kubelettest.Kubelet) string {
	devs, ok := k.Devices(resource)
	if !ok {
		return "<none>"
	}
	var s []string
	for _, d := range devs {
		s = append(s, d.ID+":"+d.Health)
	}
	return strings.Join(s, " ")
}

func TestRegistersAndListsDevices(t *testing.T) {
	r := start(t, "w0", "w1")
	r.waitDevices(t, "w0:Healthy w1:Healthy")
	regs := r.kubelet.Registrations()
	if len(regs) != 1 {
		t.Fatalf("%d registrations, want 1", len(regs))
	}
	reg := regs[0]
	if reg.Version != pluginapi.Version || reg.ResourceName != resource || reg.Endpoint != plugin.SocketName(resource) {
		t.Errorf("registered %v", reg)
	}
	if !reg.Options.GetGetPreferredAllocationAvailable() || reg.Options.GetPreStartRequired() {
		t.Errorf("options %v: the mode prefers allocations and needs no pre-start", reg.Options)
	}
	// kubelet lists the devices before Register returns to the plugin.
	if _, ok := waitUntil(2*time.Second, func() bool { return r.manager.Ready() == nil }); !ok {
		t.Errorf("Ready: %v", r.manager.Ready())
	}
	if got := gauge(t, r.manager.Metrics, "cloister_device_plugin_healthy"); got != 2 {
		t.Errorf("healthy gauge %v, want 2", got)
	}
}

// gauge reads the value of a series of the test resource.
func gauge(t *testing.T, m *plugin.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == resource {
					return s.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{resource=%q}", name, resource)
	return 0
}

func TestDeviceChangesReachListAndWatchWithoutPolling(t *testing.T) {
	r := start(t, "w0", "w1")
	r.waitDevices(t, "w0:Healthy w1:Healthy")

	write(t, filepath.Join(r.devDir, "w1"), "bad")
	r.waitDevices(t, "w0:Healthy w1:Unhealthy")

	if err := os.Remove(filepath.Join(r.devDir, "w0")); err != nil {
		t.Fatal(err)
	}
	r.waitDevices(t, "w1:Unhealthy")

	write(t, filepath.Join(r.devDir, "w2"), "ok")
	took := r.waitDevices(t, "w1:Unhealthy w2:Healthy")
	t.Logf("hot plug reached ListAndWatch in %v (rescan interval 1 h)", took)
}

func TestKubeletRestartReregisters(t *testing.T) {
	r := start(t, "w0")
	r.waitDevices(t, "w0:Healthy")
	before := r.kubelet.Restart()
	if _, ok := r.kubelet.WaitFor(5*time.Second, func() bool {
		_, listedAgain := r.kubelet.Devices(resource)
		return len(r.kubelet.Registrations()) > before && listedAgain
	}); !ok {
		t.Fatalf("no registration after kubelet restarted (had %d)", before)
	}
	if _, err := os.Stat(filepath.Join(r.pluginDir, plugin.SocketName(resource))); err != nil {
		t.Errorf("plugin socket not recreated: %v", err)
	}
	// The plugin may register twice (its socket removed, then kubelet.sock
	// created), and kubelet drops the older connection: ask on the newest.
	var err error
	if _, ok := waitUntil(2*time.Second, func() bool {
		var resp *pluginapi.AllocateResponse
		resp, err = r.kubelet.Client(resource).Allocate(context.Background(), allocReq("w0"))
		return err == nil && resp.ContainerResponses[0].Devices[0].ContainerPath == "/dev/w0"
	}); !ok {
		t.Errorf("Allocate after restart: %v", err)
	}
}

func TestRegistersWhenKubeletStartsLater(t *testing.T) {
	pluginDir := shortDir(t)
	devDir := t.TempDir()
	write(t, filepath.Join(devDir, "w0"), "ok")
	m := &plugin.Manager{Mode: &fileMode{dir: devDir}, PluginDir: pluginDir, RescanInterval: time.Hour}
	r := &rig{pluginDir: pluginDir, devDir: devDir, manager: m, done: make(chan error, 1)}
	r.run(t)
	if _, ok := waitUntil(5*time.Second, func() bool {
		err := m.Ready()
		return err != nil && strings.Contains(err.Error(), "not registered with kubelet: "+resource)
	}); !ok {
		t.Fatalf("Ready without kubelet = %v, want the resource not registered", m.Ready())
	}
	r.kubelet = kubelettest.Start(t, pluginDir)
	r.waitDevices(t, "w0:Healthy")
}

func TestAllocate(t *testing.T) {
	r := start(t, "w0", "w1", "w2")
	r.waitDevices(t, "w0:Healthy w1:Healthy w2:Healthy")
	c := r.kubelet.Client(resource)
	ctx := context.Background()

	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"w0"}}, {DevicesIds: []string{"w1", "w2"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 || len(resp.ContainerResponses[1].Devices) != 2 ||
		resp.ContainerResponses[1].Devices[1].HostPath != filepath.Join(r.devDir, "w2") {
		t.Errorf("Allocate answered %v", resp)
	}

	_, err = c.Allocate(ctx, allocReq("w9"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `device "w9" is not a device of `+resource) {
		t.Errorf("unknown device: %v", err)
	}
	write(t, filepath.Join(r.devDir, "refuse"), "ok")
	r.waitDevices(t, "refuse:Healthy w0:Healthy w1:Healthy w2:Healthy")
	if _, err = c.Allocate(ctx, allocReq("refuse")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("mode's invalid-request error: %v, want InvalidArgument", err)
	}

	pref, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"w0", "w1", "w2"}, MustIncludeDeviceIDs: []string{"w0"}, AllocationSize: 2},
	}})
	if err != nil || !slices.Equal(pref.ContainerResponses[0].DeviceIDs, []string{"w0", "w2"}) {
		t.Errorf("preferred allocation %v %v, want [w0 w2]", pref, err)
	}
	if _, err := c.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"w0"}}); err != nil {
		t.Errorf("PreStartContainer without a PreStarter: %v", err)
	}
}

func allocReq(ids ...string) *pluginapi.AllocateRequest {
	return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
}

func TestSocketInUseIsAnError(t *testing.T) {
	r := start(t, "w0")
	r.waitDevices(t, "w0:Healthy")
	second := &plugin.Manager{Mode: &fileMode{dir: r.devDir}, PluginDir: r.pluginDir}
	err := second.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "is in use by another device plugin") {
		t.Fatalf("second plugin on the same socket: %v", err)
	}
	// The first one still serves.
	if _, err := r.kubelet.Client(resource).Allocate(context.Background(), allocReq("w0")); err != nil {
		t.Errorf("first plugin after the second gave up: %v", err)
	}
}

func TestShutdownRemovesSockets(t *testing.T) {
	r := start(t, "w0")
	r.waitDevices(t, "w0:Healthy")
	r.stop(t)
	if _, err := os.Stat(filepath.Join(r.pluginDir, plugin.SocketName(resource))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after shutdown: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	pluginDir := shortDir(t)
	write(t, filepath.Join(pluginDir, plugin.SocketName(resource)), "") // left by a killed plugin
	devDir := t.TempDir()
	write(t, filepath.Join(devDir, "w0"), "ok")
	r := &rig{pluginDir: pluginDir, devDir: devDir, done: make(chan error, 1)}
	r.kubelet = kubelettest.Start(t, pluginDir)
	r.manager = &plugin.Manager{Mode: &fileMode{dir: devDir}, PluginDir: pluginDir}
	r.run(t)
	r.waitDevices(t, "w0:Healthy")
}

func TestMissingPluginDirNamesTheFlag(t *testing.T) {
	m := &plugin.Manager{Mode: &fileMode{dir: t.TempDir()}, PluginDir: filepath.Join(t.TempDir(), "nope")}
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "--plugin-dir") {
		t.Errorf("Run = %v, want an error naming --plugin-dir", err)
	}
}

func TestInUseDevicesReachReleaserAndMetric(t *testing.T) {
	pluginDir := shortDir(t)
	devDir := t.TempDir()
	for _, d := range []string{"w0", "w1", "w2"} {
		write(t, filepath.Join(devDir, d), "ok")
	}
	pr := kubelettest.StartPodResources(t, filepath.Join(pluginDir, "pod-resources.sock"))
	pr.Assign(resource, "w0", "w2")
	pr.Assign("other.example/thing", "x")
	mode := &fileMode{dir: devDir}
	r := &rig{pluginDir: pluginDir, devDir: devDir, mode: mode, done: make(chan error, 1)}
	r.kubelet = kubelettest.Start(t, pluginDir)
	r.manager = &plugin.Manager{Mode: mode, PluginDir: pluginDir, RescanInterval: 20 * time.Millisecond,
		PodResourcesSocket: filepath.Join(pluginDir, "pod-resources.sock")}
	r.run(t)
	if _, ok := waitUntil(5*time.Second, func() bool {
		mode.mu.Lock()
		defer mode.mu.Unlock()
		return len(mode.released) > 0 && slices.Equal(mode.released[len(mode.released)-1][resource], []string{"w0", "w2"})
	}); !ok {
		t.Fatalf("Releaser never saw the devices in use: %v", mode.released)
	}
	if got := gauge(t, r.manager.Metrics, "cloister_device_plugin_allocated"); got != 2 {
		t.Errorf("allocated gauge %v, want 2", got)
	}
}

func waitUntil(timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), cond()
}

// unwatched hides fileMode's WatchPaths: only a Rescan signal (or the
// timer) can notice its changes.
type unwatched struct{ f *fileMode }

func (u unwatched) Scan(ctx context.Context) (plugin.Inventory, error) { return u.f.Scan(ctx) }
func (u unwatched) Allocate(ctx context.Context, r string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	return u.f.Allocate(ctx, r, ids)
}

func TestRescanSignal(t *testing.T) {
	pluginDir, devDir := shortDir(t), t.TempDir()
	write(t, filepath.Join(devDir, "w0"), "ok")
	rescan := make(chan struct{}, 1)
	r := &rig{pluginDir: pluginDir, devDir: devDir, done: make(chan error, 1)}
	r.kubelet = kubelettest.Start(t, pluginDir)
	r.manager = &plugin.Manager{Mode: unwatched{&fileMode{dir: devDir}}, PluginDir: pluginDir, RescanInterval: time.Hour, Rescan: rescan}
	r.run(t)
	r.waitDevices(t, "w0:Healthy")
	write(t, filepath.Join(devDir, "w1"), "ok")
	time.Sleep(200 * time.Millisecond)
	if got := listed(r.kubelet); got != "w0:Healthy" {
		t.Fatalf("an unwatched change arrived without a signal: %q", got)
	}
	rescan <- struct{}{}
	r.waitDevices(t, "w0:Healthy w1:Healthy")
}

// Draining, during a migration to DRA, the manager registers nothing with
// the kubelet (which then hands pods' limits to the DRA driver), is ready
// at once, and still releases what the containers that hold devices
// through it no longer use.
func TestDrainRegistersNothingAndStillReleases(t *testing.T) {
	pluginDir := shortDir(t)
	devDir := t.TempDir()
	write(t, filepath.Join(devDir, "w0"), "ok")
	pr := kubelettest.StartPodResources(t, filepath.Join(pluginDir, "pod-resources.sock"))
	pr.Assign(resource, "w0")
	mode := &fileMode{dir: devDir}
	r := &rig{pluginDir: pluginDir, devDir: devDir, mode: mode, done: make(chan error, 1)}
	r.kubelet = kubelettest.Start(t, pluginDir)
	r.manager = &plugin.Manager{Mode: mode, PluginDir: pluginDir, RescanInterval: 20 * time.Millisecond, Drain: true,
		PodResourcesSocket: filepath.Join(pluginDir, "pod-resources.sock")}
	r.run(t)
	if _, ok := waitUntil(5*time.Second, func() bool {
		mode.mu.Lock()
		defer mode.mu.Unlock()
		return len(mode.released) > 1 && slices.Equal(mode.released[len(mode.released)-1][resource], []string{"w0"})
	}); !ok {
		t.Fatalf("Releaser never saw the devices in use: %v", mode.released)
	}
	if regs := r.kubelet.Registrations(); len(regs) != 0 {
		t.Errorf("a draining plugin registered %v", regs)
	}
	if err := r.manager.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pluginDir, plugin.SocketName(resource))); !os.IsNotExist(err) {
		t.Errorf("a draining plugin's socket: %v", err)
	}
}
