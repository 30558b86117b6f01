// Package kubelettest is the kubelet side of the device-plugin protocol for
// tests: a real gRPC Registration server on a unix socket that, like
// kubelet, opens a ListAndWatch stream to every plugin that registers, and
// a pod-resources server reporting which devices containers hold.
package kubelettest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// Kubelet is a fake kubelet serving Registration in Dir.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer

	Dir string
	t   testing.TB

	mu       sync.Mutex
	srv      *grpc.Server
	requests []*pluginapi.RegisterRequest
	lists    map[string][]*pluginapi.Device // last ListAndWatch answer per resource
	clients  map[string]*grpc.ClientConn
	changed  chan struct{}
}

// Start serves kubelet.sock in dir until the test ends.
func Start(t testing.TB, dir string) *Kubelet {
	k := &Kubelet{Dir: dir, t: t, lists: map[string][]*pluginapi.Device{}, clients: map[string]*grpc.ClientConn{}, changed: make(chan struct{})}
	k.serve()
	t.Cleanup(k.Stop)
	return k
}

func (k *Kubelet) serve() {
	lis, err := net.Listen("unix", filepath.Join(k.Dir, "kubelet.sock"))
	if err != nil {
		k.t.Fatalf("fake kubelet: %v", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	k.mu.Lock()
	k.srv = srv
	k.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
}

// Stop ends the fake kubelet and removes its socket.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	srv, clients := k.srv, k.clients
	k.srv, k.clients = nil, map[string]*grpc.ClientConn{}
	k.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(filepath.Join(k.Dir, "kubelet.sock"))
}

// Restart does what kubelet does when it starts again: it stops, removes
// every file in the plugin directory and serves a new kubelet.sock. It
// returns how many registrations it had seen before.
func (k *Kubelet) Restart() int {
	k.Stop()
	entries, _ := os.ReadDir(k.Dir)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(k.Dir, e.Name()))
	}
	k.mu.Lock()
	n := len(k.requests)
	k.lists = map[string][]*pluginapi.Device{}
	k.mu.Unlock()
	k.serve()
	return n
}

// Register records the request and, like kubelet, watches the plugin.
func (k *Kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.GetVersion())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.Dir, req.GetEndpoint()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if old := k.clients[req.GetResourceName()]; old != nil {
		_ = old.Close()
	}
	k.clients[req.GetResourceName()] = conn
	k.requests = append(k.requests, req)
	k.notify()
	k.mu.Unlock()
	go k.watch(req.GetResourceName(), conn) //nolint:gosec // the watch outlives the registration request, as the kubelet's does
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) watch(resource string, conn *grpc.ClientConn) {
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		k.mu.Lock()
		k.lists[resource] = resp.GetDevices()
		k.notify()
		k.mu.Unlock()
	}
}

func (k *Kubelet) notify() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Registrations returns every registration so far.
func (k *Kubelet) Registrations() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), k.requests...)
}

// Devices returns the last ListAndWatch answer for resource and whether one
// arrived.
func (k *Kubelet) Devices(resource string) ([]*pluginapi.Device, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d, ok := k.lists[resource]
	return d, ok
}

// WaitFor blocks until cond holds (checked after every registration and
// ListAndWatch answer) or timeout passes, and returns how long it took.
func (k *Kubelet) WaitFor(timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	deadline := time.After(timeout)
	for {
		k.mu.Lock()
		ch := k.changed
		k.mu.Unlock()
		if cond() {
			return time.Since(start), true
		}
		select {
		case <-ch:
		case <-deadline:
			return time.Since(start), cond()
		}
	}
}

// Client connects to the plugin of resource as kubelet does.
func (k *Kubelet) Client(resource string) pluginapi.DevicePluginClient {
	k.mu.Lock()
	defer k.mu.Unlock()
	conn := k.clients[resource]
	if conn == nil {
		k.t.Fatalf("fake kubelet: %s never registered", resource)
	}
	return pluginapi.NewDevicePluginClient(conn)
}

// PodResources is a fake pod-resources API: its Assigned devices are what
// List reports.
type PodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu       sync.Mutex
	assigned map[string][]string
}

// StartPodResources serves the pod-resources API on socket.
func StartPodResources(t testing.TB, socket string) *PodResources {
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("fake pod-resources: %v", err)
	}
	p := &PodResources{assigned: map[string][]string{}}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return p
}

// Assign sets the devices of resource held by containers.
func (p *PodResources) Assign(resource string, ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.assigned[resource] = ids
}

// List reports one pod with one container per resource.
func (p *PodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod := &podresourcesapi.PodResources{Name: "workload", Namespace: "default"}
	for r, ids := range p.assigned {
		pod.Containers = append(pod.Containers, &podresourcesapi.ContainerResources{
			Name: "c", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: r, DeviceIds: ids}},
		})
	}
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{pod}}, nil
}

// ReportPercentiles adds p50 and p99 of a benchmark's latencies to its
// output.
func ReportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// Serve runs mode's plugins against a new fake kubelet in a temp plugin
// directory (short enough for unix socket paths) until the test ends.
// It also serves a fake pod-resources API, returned.
func Serve(tb testing.TB, mode plugin.Mode, rescan time.Duration) (*Kubelet, *PodResources) {
	tb.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	k := Start(tb, dir)
	pr := StartPodResources(tb, filepath.Join(dir, "pod-resources.sock"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&plugin.Manager{Mode: mode, PluginDir: dir, RescanInterval: rescan,
			PodResourcesSocket: filepath.Join(dir, "pod-resources.sock")}).Run(ctx)
	}()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return k, pr
}

// Listed renders the last ListAndWatch answer for resource as
// "id:Health id:Health", or "not listed".
func (k *Kubelet) Listed(resource string) string {
	devs, ok := k.Devices(resource)
	if !ok {
		return "not listed"
	}
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = d.ID + ":" + d.Health
	}
	return strings.Join(s, " ")
}

// WaitListed fails tb unless resource is listed as want within 2 s, the
// hot-plug goal, and returns how long it took.
func (k *Kubelet) WaitListed(tb testing.TB, resource, want string) time.Duration {
	tb.Helper()
	took, ok := k.WaitFor(2*time.Second, func() bool { return k.Listed(resource) == want })
	if !ok {
		tb.Fatalf("after 2 s kubelet sees %s = %q\nwant %q", resource, k.Listed(resource), want)
	}
	return took
}
