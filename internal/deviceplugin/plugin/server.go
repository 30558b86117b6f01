package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// server is the DevicePlugin gRPC service of one resource.
type server struct {
	pluginapi.UnimplementedDevicePluginServer

	resource string
	socket   string
	mode     Mode
	metrics  *Metrics

	mu      sync.Mutex
	devices []*pluginapi.Device
	known   map[string]bool
	changed chan struct{} // closed and replaced on every change
	grpc    *grpc.Server
	stopped chan struct{}
}

func newServer(dir, resource string, mode Mode, m *Metrics) *server {
	return &server{
		resource: resource,
		socket:   filepath.Join(dir, SocketName(resource)),
		mode:     mode,
		metrics:  m,
		known:    map[string]bool{},
		changed:  make(chan struct{}),
	}
}

// SocketName is the file a resource's server listens on in the plugin
// directory.
func SocketName(resource string) string {
	return "cloister-" + strings.NewReplacer("/", "_", ".", "_").Replace(resource) + ".sock"
}

// start listens on the socket and returns once the server answers on it,
// so kubelet never gets an endpoint that refuses it. A stale socket file is
// replaced; one another process still serves on is an error.
func (s *server) start(ctx context.Context) error {
	if _, err := os.Stat(s.socket); err == nil {
		if conn, err := net.Dial("unix", s.socket); err == nil {
			_ = conn.Close()
			return fmt.Errorf("socket %s is in use by another device plugin for %s", s.socket, s.resource)
		}
		if err := os.Remove(s.socket); err != nil {
			return fmt.Errorf("removing stale socket: %w", err)
		}
	}
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.socket, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc, s.stopped = g, make(chan struct{})
	s.mu.Unlock()
	go func() { _ = g.Serve(lis) }()
	if !serving(ctx, s.socket) {
		s.stop()
		return fmt.Errorf("device plugin for %s does not answer on %s", s.resource, s.socket)
	}
	return nil
}

// stop ends the server and its streams and removes the socket.
func (s *server) stop() {
	s.mu.Lock()
	g, stopped := s.grpc, s.stopped
	s.grpc = nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	close(stopped) // ends ListAndWatch streams, which Stop would wait for
	g.Stop()
	_ = os.Remove(s.socket)
}

// serving reports whether a DevicePlugin server answers on socket.
func serving(ctx context.Context, socket string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := dial(socket)
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	return err == nil
}

func dial(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// update replaces the device list; streams see it when it differs.
func (s *server) update(devs []Device) bool {
	list := make([]*pluginapi.Device, len(devs))
	known := make(map[string]bool, len(devs))
	for i, d := range devs {
		h := pluginapi.Healthy
		if !d.Healthy {
			h = pluginapi.Unhealthy
		}
		list[i] = &pluginapi.Device{ID: d.ID, Health: h}
		known[d.ID] = true
	}
	slices.SortFunc(list, func(a, b *pluginapi.Device) int { return strings.Compare(a.ID, b.ID) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.EqualFunc(list, s.devices, func(a, b *pluginapi.Device) bool { return a.ID == b.ID && a.Health == b.Health }) && s.devices != nil {
		return false
	}
	s.devices, s.known = list, known
	close(s.changed)
	s.changed = make(chan struct{})
	return true
}

func (s *server) snapshot() ([]*pluginapi.Device, chan struct{}, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.devices, s.changed, s.stopped
}

func (s *server) options() *pluginapi.DevicePluginOptions {
	_, pre := s.mode.(PreStarter)
	_, pref := s.mode.(PreferredAllocator)
	return &pluginapi.DevicePluginOptions{PreStartRequired: pre, GetPreferredAllocationAvailable: pref}
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.options(), nil
}

// ListAndWatch sends the full list now and again after every change.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed, stopped := s.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stopped:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

// Allocate answers for every container of the request; IDs this plugin
// never offered are refused before the mode sees them.
func (s *server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	start := time.Now()
	resp, err := s.allocate(ctx, req)
	s.metrics.observeAllocate(s.resource, time.Since(start), err)
	return resp, err
}

func (s *server) allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		if err := s.checkKnown(c.GetDevicesIds()); err != nil {
			return nil, err
		}
		cr, err := s.mode.Allocate(ctx, s.resource, c.GetDevicesIds())
		if err != nil {
			return nil, status.Errorf(codeOf(err), "allocating %v of %s: %v", c.GetDevicesIds(), s.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (s *server) checkKnown(ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if !s.known[id] {
			return status.Errorf(codes.InvalidArgument, "device %q is not a device of %s on this node", id, s.resource)
		}
	}
	return nil
}

func (s *server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	pa, ok := s.mode.(PreferredAllocator)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "%s has no preferred allocation", s.resource)
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		ids, err := pa.PreferredAllocation(s.resource, c.GetAvailableDeviceIDs(), c.GetMustIncludeDeviceIDs(), int(c.GetAllocationSize()))
		if err != nil {
			return nil, status.Errorf(codeOf(err), "preferring devices of %s: %v", s.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *server) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if ps, ok := s.mode.(PreStarter); ok {
		if err := ps.PreStart(ctx, s.resource, req.GetDevicesIds()); err != nil {
			return nil, status.Errorf(codeOf(err), "preparing %v of %s: %v", req.GetDevicesIds(), s.resource, err)
		}
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// ErrInvalid marks a request the mode refuses as wrong (not as failed).
var ErrInvalid = errors.New("invalid request")

func codeOf(err error) codes.Code {
	if errors.Is(err, ErrInvalid) {
		return codes.InvalidArgument
	}
	return codes.Internal
}
