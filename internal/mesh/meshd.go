// Package mesh is cloister-mesh's job in a confidential pod. Its
// `redirect` step (an init container, the only one with NET_ADMIN) sets
// the pod's nftables redirect; its `proxy` (a native sidecar without
// capabilities) runs the ingress proxy for the redirected ports, one
// egress listener per upstream, and the plain admin port: /healthz (ready
// once every listener is up and the certificates load; the sidecar's
// startup probe), /metrics, and /app-health/ (the kubelet's probes of
// meshed ports, run against the app). `forward` is the port forwarder,
// an ordinary pod relaying to a confidential pod's ports.
//
// Its folder is the service mesh: annotation (the grammar of the mesh
// annotations), redirect (the nftables redirect), proxy (ingress and
// egress) and meshtest.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
	"github.com/cloister-cc/cloister/internal/mesh/redirect"
)

// The proxy's own ports: never redirected to the app, so apps must not
// use them.
const (
	DefaultProxyPort = annotation.ProxyPort
	DefaultAdminPort = annotation.AdminPort
)

// Config is one pod's mesh, as generate writes it into the containers'
// arguments (so the pod's policy covers it).
type Config struct {
	// Ingress and Egress are the annotations' values.
	Ingress, Egress string
	// Certs is the initializer's folder of certificates.
	Certs                string
	ProxyPort, AdminPort uint16
	// MaxConnections caps each listener's open connections,
	// MaxConnectionsPerSource those of one caller on the ingress (0: no
	// cap per source), IdleTimeout ends connections no side sends on (0:
	// the proxy's defaults).
	MaxConnections, MaxConnectionsPerSource int
	IdleTimeout                             time.Duration
	// AppProbes are the kubelet's probes of meshed ports, by name
	// (CONTAINER/KIND), which the admin port runs against the app's URL.
	AppProbes map[string]string
}

func (c Config) parse() (annotation.Config, error) {
	var out annotation.Config
	var err error
	if out.Ingress, err = annotation.ParseIngress(c.Ingress); err != nil {
		return out, fmt.Errorf("ingress: %w", err)
	}
	if out.Egress, err = annotation.ParseEgress(c.Egress); err != nil {
		return out, fmt.Errorf("egress: %w", err)
	}
	return out, nil
}

// Rules is the pod's redirect: every inbound TCP port but the plain ones
// and the admin port to the proxy.
func (c Config) Rules() (redirect.Rules, error) {
	cfg, err := c.parse()
	if err != nil {
		return redirect.Rules{}, err
	}
	return redirect.Rules{ProxyPort: c.ProxyPort, Exclude: append(cfg.Ingress.PlainPorts(), c.AdminPort)}, nil
}

// Redirect sets the pod's redirect in the network namespace it runs in
// (none when the ingress is disabled).
func Redirect(cfg Config, log *slog.Logger) error {
	mc, err := cfg.parse()
	if err != nil {
		return err
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	if mc.Ingress.Disabled {
		log.Info("ingress disabled: no redirect")
		return redirect.Remove(conn)
	}
	rules, err := cfg.Rules()
	if err != nil {
		return err
	}
	if err := redirect.Apply(conn, rules); err != nil {
		return fmt.Errorf("%w (the container needs the NET_ADMIN capability)", err)
	}
	log.Info("inbound TCP redirected to the ingress proxy", "proxyPort", rules.ProxyPort, "plainPorts", rules.Exclude)
	return nil
}

// Proxy runs the proxies until ctx ends.
func Proxy(ctx context.Context, cfg Config, log *slog.Logger) error {
	mc, err := cfg.parse()
	if err != nil {
		return err
	}
	certs := &proxy.Certs{Dir: cfg.Certs}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	conns := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cloister_mesh_connections_total",
		Help: "Connections through the mesh proxy, by direction (ingress, egress) and outcome (forwarded, refused, unreachable, limited: closed at once at the listener's connection cap)."},
		[]string{"direction", "outcome"})
	reg.MustRegister(conns)
	p := &proxy.Proxy{Log: log, Count: func(d, o string) { conns.WithLabelValues(d, o).Inc() },
		MaxConnections: cfg.MaxConnections, MaxConnectionsPerSource: cfg.MaxConnectionsPerSource, IdleTimeout: cfg.IdleTimeout}

	// Listen on everything first: once /healthz answers, every port does.
	type listener struct {
		ln  net.Listener
		run func(ctx context.Context, ln net.Listener) error
	}
	var ls []listener
	defer func() {
		for _, l := range ls {
			_ = l.ln.Close()
		}
	}()
	listen := func(addr string, run func(ctx context.Context, ln net.Listener) error) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		ls = append(ls, listener{ln, run})
		return nil
	}
	if !mc.Ingress.Disabled {
		ports := proxy.NewPorts(mc.Ingress, certs, cfg.ProxyPort, cfg.AdminPort)
		if err := listen(net.JoinHostPort("", strconv.Itoa(int(cfg.ProxyPort))), func(ctx context.Context, ln net.Listener) error {
			return p.Ingress(ctx, ln, ports.Route)
		}); err != nil {
			return fmt.Errorf("the ingress proxy: %w", err)
		}
	}
	for _, e := range mc.Egress {
		if err := listen(e.Listen.String(), func(ctx context.Context, ln net.Listener) error {
			return p.Egress(ctx, ln, e.Upstream, certs)
		}); err != nil {
			return fmt.Errorf("egress %s: %w", e.Name, err)
		}
		log.Info("egress", "name", e.Name, "listen", e.Listen.String(), "upstream", e.Upstream)
	}
	admin := http.NewServeMux()
	admin.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	admin.Handle("GET "+AppHealthPath, appProbes(cfg.AppProbes))
	admin.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := certs.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// Only the probes and the metrics, each request bounded.
	srv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	if err := listen(net.JoinHostPort("", strconv.Itoa(int(cfg.AdminPort))), func(ctx context.Context, ln net.Listener) error {
		go func() { //nolint:gosec // shuts the server down after ctx is done, so it needs a context of its own
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}); err != nil {
		return fmt.Errorf("the admin port: %w", err)
	}
	log.Info("mesh proxy up", "ingress", !mc.Ingress.Disabled, "proxyPort", cfg.ProxyPort, "adminPort", cfg.AdminPort, "egress", len(mc.Egress))
	g, gctx := errgroup.WithContext(ctx)
	for _, l := range ls {
		g.Go(func() error { return l.run(gctx, l.ln) })
	}
	return g.Wait()
}
