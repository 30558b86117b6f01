package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloister-cc/cloister/internal/mesh/proxy"
)

// ForwardConfig is a port forwarder's: an ordinary pod that relays its
// ports to a confidential pod's, because the kubelet cannot port-forward
// into a Kata VM (kata-containers issue 1693). TLS passes through it
// untouched, end to end.
type ForwardConfig struct {
	// To is the confidential pod's host (its Service's name).
	To    string
	Ports []uint16
	// ListenHost is where it listens (empty: every address).
	ListenHost string
	// MaxConnections, MaxConnectionsPerSource and IdleTimeout as the
	// proxy's.
	MaxConnections, MaxConnectionsPerSource int
	IdleTimeout                             time.Duration
}

// Forward relays each port to the same port of cfg.To until ctx ends.
func Forward(ctx context.Context, cfg ForwardConfig, log *slog.Logger) error {
	if cfg.To == "" || len(cfg.Ports) == 0 {
		return fmt.Errorf("a forwarder needs a host to relay to and at least one port")
	}
	p := &proxy.Proxy{Log: log, MaxConnections: cfg.MaxConnections, MaxConnectionsPerSource: cfg.MaxConnectionsPerSource, IdleTimeout: cfg.IdleTimeout}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for _, port := range cfg.Ports {
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, strconv.Itoa(int(port))))
		if err != nil {
			return fmt.Errorf("port %d: %w", port, err)
		}
		lns = append(lns, ln)
	}
	log.Info("forwarding", "to", cfg.To, "ports", cfg.Ports)
	g, gctx := errgroup.WithContext(ctx)
	for i, ln := range lns {
		target := net.JoinHostPort(cfg.To, strconv.Itoa(int(cfg.Ports[i])))
		g.Go(func() error { return p.Ingress(gctx, ln, proxy.Fixed(target, nil)) })
	}
	return g.Wait()
}
