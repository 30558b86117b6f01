// Command cloister-mesh is the service mesh of confidential pods:
// `cloister-mesh redirect` (an init container with NET_ADMIN) sets the
// pod's redirect, `cloister-mesh proxy` (a native sidecar) runs the
// proxies, `cloister-mesh forward` (an ordinary pod) relays ports to a
// confidential pod; see internal/mesh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/mesh"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

func main() { startup.Main("cloister-mesh", run) }

func run(ctx context.Context) error {
	const usage = "usage: cloister-mesh redirect|proxy|forward [flags] (cloister-mesh proxy --help lists them)"
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "-help") {
		fmt.Fprintln(os.Stderr, usage)
		return flag.ErrHelp
	}
	if len(os.Args) < 2 || (os.Args[1] != "redirect" && os.Args[1] != "proxy" && os.Args[1] != "forward") {
		return errors.New(usage)
	}
	step := os.Args[1]
	cfg := mesh.Config{AppProbes: map[string]string{}}
	fs := flag.NewFlagSet("cloister-mesh "+step, flag.ContinueOnError)
	fs.Func("app-probe", "proxy: NAME=URL, a kubelet probe of a meshed port, answered at the admin port's "+mesh.AppHealthPath+"NAME from the app's URL (http(s)://127.0.0.1:PORT/PATH; repeated)", func(v string) error {
		name, target, err := mesh.ParseAppProbe(v)
		cfg.AppProbes[name] = target
		return err
	})
	var fwd mesh.ForwardConfig
	fs.StringVar(&fwd.To, "to", "", "forward: the confidential pods' host (their Service's name)")
	fs.Func("port", "forward: a port to relay to the same port of --to (repeated)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("port %q: not 1-65535", v)
		}
		fwd.Ports = append(fwd.Ports, uint16(n))
		return nil
	})
	fs.StringVar(&cfg.Ingress, "ingress", "", "the ingress annotation's value (name#port#disableTLS entries joined by ##; empty: mTLS on every port; DISABLED: no ingress proxy)")
	fs.StringVar(&cfg.Egress, "egress", "", "the egress annotation's value (name#127.x.y.z:port#host:port entries joined by ##)")
	fs.StringVar(&cfg.Certs, "certs", initenv.DefaultOut, "the folder of the workload certificate, key and mesh CA the initializer wrote")
	proxyPort := fs.Uint("proxy-port", mesh.DefaultProxyPort, "where the ingress proxy listens (the redirect's target)")
	adminPort := fs.Uint("admin-port", mesh.DefaultAdminPort, "the plain admin port: /healthz, /metrics")
	fs.IntVar(&cfg.MaxConnections, "max-connections", proxy.DefaultMaxConnections, "open connections per listener; one more is closed at once (counted as limited)")
	fs.IntVar(&cfg.MaxConnectionsPerSource, "max-connections-per-source", proxy.DefaultMaxConnectionsPerSource, "open ingress connections from one caller's address; one more is closed at once (counted as limited)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "end a connection neither side sent on for this long")
	log, err := startup.ParseFlags(fs, os.Args[2:], os.Stderr)
	if err != nil {
		return err
	}
	if cfg.MaxConnections < 1 || cfg.MaxConnectionsPerSource < 1 || cfg.IdleTimeout < time.Second {
		return errors.New("--max-connections and --max-connections-per-source are at least 1, and --idle-timeout at least 1s")
	}
	for _, p := range []*uint{proxyPort, adminPort} {
		if *p == 0 || *p > 65535 {
			return errors.New("ports are 1-65535")
		}
	}
	cfg.ProxyPort, cfg.AdminPort = uint16(*proxyPort), uint16(*adminPort) //nolint:gosec // both checked to be 1-65535 above
	switch step {
	case "redirect":
		return mesh.Redirect(cfg, log)
	case "forward":
		fwd.MaxConnections, fwd.MaxConnectionsPerSource, fwd.IdleTimeout = cfg.MaxConnections, cfg.MaxConnectionsPerSource, cfg.IdleTimeout
		return mesh.Forward(ctx, fwd, log)
	}
	return mesh.Proxy(ctx, cfg, log)
}
