// Package nodeinstaller is the node side of a ConfidentialRuntime: in a
// privileged pod of its DaemonSet it adds the platform's runtime handler
// to the node's containerd as a drop-in, restarts containerd when the
// configuration changed, checks through the CRI that the handler is
// served (or takes the drop-in back out when containerd does not come
// back with it), and only then labels the node so the RuntimeClass
// schedules pods there. In removal mode it does the reverse, label first.
// It reports through its pod: ready once done, and on failure exits with
// the reason as its termination message, which the operator puts into the
// ConfidentialRuntime's per-node status.
package nodeinstaller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// Config is one installer's job.
type Config struct {
	Platform runtimeclass.Platform
	// Handler is the runtime handler's name (ccruntime.ClassName).
	Handler string
	// Root is where the host's folders are mounted in the pod.
	Root string
	// ConfigPath is containerd's configuration on the host.
	ConfigPath string
	// Socket is containerd's gRPC socket on the host; it must be the one
	// the configuration names.
	Socket string
	// Remove takes the handler out instead of adding it.
	Remove bool
	// Node labels the node; nil leaves labels alone.
	Node nodelabel.Labeler
	// Probe is the address of /readyz, which answers 200 once done.
	Probe string
	// TerminationLog receives the reason of a failure, for the pod's
	// status ("" writes none).
	TerminationLog string
	// Timeout bounds each wait on containerd.
	Timeout time.Duration
}

// Run does the job, serves /readyz, and then waits for ctx to end: the pod
// stays as the node's record of what was done. A DaemonSet rollout does
// not undo anything; removal is a rollout in removal mode.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	var ready atomic.Bool
	ln, err := net.Listen("tcp", cfg.Probe)
	if err != nil {
		return fmt.Errorf("listening for probes: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not done", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	if err := do(ctx, cfg, log); err != nil {
		if cfg.TerminationLog != "" {
			_ = os.WriteFile(cfg.TerminationLog, []byte(err.Error()), 0o644) //nolint:gosec // the termination message the kubelet reads; the reason holds no secret
		}
		return err
	}
	ready.Store(true)
	<-ctx.Done()
	return nil
}

func do(ctx context.Context, cfg Config, log *slog.Logger) error {
	h, err := runtimeclass.PlatformHandler(cfg.Platform, cfg.Handler)
	if err != nil {
		return err
	}
	in := &runtimeclass.Installer{Root: cfg.Root, ConfigPath: cfg.ConfigPath}
	config, err := os.ReadFile(filepath.Join(cfg.Root, in.ConfigPath))
	if err != nil {
		return fmt.Errorf("reading containerd's configuration: %w", err)
	}
	socket, err := runtimeclass.Socket(config)
	if err != nil {
		return err
	}
	if cfg.Socket != "" && filepath.Clean(cfg.Socket) != filepath.Clean(socket) {
		return fmt.Errorf("containerd's configuration %s puts its socket at %s, not at %s: set containerdSocket to %s", in.ConfigPath, socket, cfg.Socket, socket)
	}
	ctrd := &Containerd{ConfigPath: in.ConfigPath, Socket: filepath.Join(cfg.Root, socket), Timeout: cfg.Timeout}
	if in.ConfigPath == "" {
		ctrd.ConfigPath = runtimeclass.DefaultConfigPath
	}
	log = log.With("handler", h.Name, "platform", cfg.Platform)
	if cfg.Remove {
		return remove(ctx, cfg, in, ctrd, h.Name, log)
	}
	return install(ctx, cfg, in, ctrd, h, log)
}

func install(ctx context.Context, cfg Config, in *runtimeclass.Installer, ctrd *Containerd, h runtimeclass.Handler, log *slog.Logger) error {
	changed, err := in.Install(h)
	if err != nil {
		return fmt.Errorf("installing the runtime handler %s: %w", h.Name, err)
	}
	if !changed {
		// Installed before (a restarted pod): restart only if containerd
		// answers without it. One that does not answer is not touched
		// (and nothing is rolled back): the pod retries.
		has, err := ctrd.Has(ctx, h.Name)
		if err != nil {
			return fmt.Errorf("the runtime handler %s is in containerd's configuration, but containerd does not answer: %w", h.Name, err)
		}
		changed = !has
	}
	if changed {
		log.Info("restarting containerd to load the runtime handler", "dropIn", in.DropInPath(h.Name))
		start := time.Now()
		if err := ctrd.Restart(ctx, h.Name, true); err != nil {
			// Never leave the node with a configuration containerd
			// cannot run: take the drop-in out again.
			if _, uerr := in.Uninstall(h.Name); uerr != nil {
				return errors.Join(err, fmt.Errorf("taking the runtime handler out again: %w", uerr))
			}
			_ = ctrd.Restart(ctx, h.Name, false)
			return fmt.Errorf("containerd did not come back with the runtime handler %s, so it was taken out again (see containerd's log): %w", h.Name, err)
		}
		log.Info("containerd serves the runtime handler", "restart", time.Since(start).Round(time.Millisecond))
	}
	if err := label(ctx, cfg, h.Name, true); err != nil {
		return err
	}
	log.Info("installed; node labelled", "label", runtimeclass.NodeLabel(h.Name))
	return nil
}

func remove(ctx context.Context, cfg Config, in *runtimeclass.Installer, ctrd *Containerd, name string, log *slog.Logger) error {
	// Label first: no new pod is scheduled onto a handler about to go.
	if err := label(ctx, cfg, name, false); err != nil {
		return err
	}
	changed, err := in.Uninstall(name)
	if err != nil {
		return fmt.Errorf("removing the runtime handler %s: %w", name, err)
	}
	if changed {
		log.Info("restarting containerd without the runtime handler")
		if err := ctrd.Restart(ctx, name, false); err != nil {
			return err
		}
	}
	log.Info("removed")
	return nil
}

func label(ctx context.Context, cfg Config, name string, present bool) error {
	if cfg.Node == nil {
		return nil
	}
	var v *string
	if present {
		t := "true"
		v = &t
	}
	return cfg.Node.SetLabel(ctx, runtimeclass.NodeLabel(name), v)
}
