package nodeinstaller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// Containerd is the node's containerd, as the installer's pod sees it:
// its processes in the host's PID namespace, its socket under Root.
type Containerd struct {
	// ConfigPath is its configuration on the host: the process to restart
	// is the containerd that reads it.
	ConfigPath string
	// Socket is its gRPC address as the installer reaches it.
	Socket string
	// Timeout bounds each wait of a restart: the old process gone, a new
	// one answering.
	Timeout time.Duration
}

// configOf is the configuration a containerd command line reads.
func configOf(argv []string) string {
	for i := 1; i < len(argv); i++ {
		switch a := argv[i]; {
		case (a == "--config" || a == "-c") && i+1 < len(argv):
			return argv[i+1]
		case strings.HasPrefix(a, "--config="):
			return strings.TrimPrefix(a, "--config=")
		}
	}
	return runtimeclass.DefaultConfigPath
}

// isContainerd says whether argv runs containerd itself (not a shim, not
// ctr) with the configuration at path.
func isContainerd(argv [][]byte, path string) bool {
	if len(argv) == 0 || filepath.Base(string(argv[0])) != "containerd" {
		return false
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = string(bytes.Clone(a))
	}
	// containerd subcommands (config dump, ...) are not the daemon.
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		return false
	}
	return filepath.Clean(configOf(args)) == filepath.Clean(path)
}

// Pids lists the containerd daemons reading ConfigPath.
func (c *Containerd) Pids() []int {
	return proc.Find(func(argv [][]byte) bool { return isContainerd(argv, c.ConfigPath) })
}

// errNoHandlerList: a CRI older than runtime_handlers (containerd 1.x)
// cannot say which handlers it has.
var errNoHandlerList = errors.New("the CRI does not list its runtime handlers")

// Handlers asks containerd's CRI which runtime handlers it has.
func (c *Containerd) Handlers(ctx context.Context) ([]string, error) {
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("asking containerd's CRI at %s: %w", c.Socket, err)
	}
	if len(resp.GetRuntimeHandlers()) == 0 {
		return nil, errNoHandlerList
	}
	names := make([]string, 0, len(resp.GetRuntimeHandlers()))
	for _, h := range resp.GetRuntimeHandlers() {
		names = append(names, h.GetName())
	}
	return names, nil
}

// Has says whether containerd serves the handler name; an old CRI that
// does not list handlers is taken at its word once it answers.
func (c *Containerd) Has(ctx context.Context, name string) (bool, error) {
	names, err := c.Handlers(ctx)
	if errors.Is(err, errNoHandlerList) {
		return true, nil
	}
	return slices.Contains(names, name), err
}

// Restart stops containerd and waits for its supervisor to start it again
// (systemd's containerd.service has Restart=always) until its CRI answers
// with want present or absent. Stopping containerd leaves the containers
// running: their shims outlive it, and the new containerd finds them.
func (c *Containerd) Restart(ctx context.Context, handler string, want bool) error {
	pids := c.Pids()
	if len(pids) == 0 {
		return fmt.Errorf("no containerd with the configuration %s runs on this node (the pod needs the host's PID namespace)", c.ConfigPath)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping containerd (pid %d): %w", pid, err)
		}
	}
	if err := proc.WaitGone(pids, c.Timeout); err != nil {
		return fmt.Errorf("stopping containerd: %w", err)
	}
	return c.WaitFor(ctx, handler, want)
}

// WaitFor waits until a containerd answers with handler present (want) or
// absent.
func (c *Containerd) WaitFor(ctx context.Context, handler string, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var last error
	for {
		has, err := c.Has(ctx, handler)
		switch {
		case err == nil && has == want:
			return nil
		case err == nil && want:
			last = fmt.Errorf("containerd answers without the runtime handler %s", handler)
		case err == nil:
			last = fmt.Errorf("containerd still has the runtime handler %s", handler)
		case len(c.Pids()) == 0:
			last = errors.New("containerd is not running: its supervisor (systemd's containerd.service, with Restart=always) must start it again")
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd not back within %s: %w", c.Timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
