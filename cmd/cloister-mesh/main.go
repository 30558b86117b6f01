// Command cloister-mesh is the service mesh of confidential pods:
// `cloister-mesh redirect` (an init container with NET_ADMIN) sets the
// pod's redirect, `cloister-mesh proxy` (a native sidecar) runs the
// proxies; see internal/mesh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/cloister-cc/cloister/internal/workload/initenv"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/mesh"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
)

func main() { startup.Main("cloister-mesh", run) }

func run(ctx context.Context) error {
	const usage = "usage: cloister-mesh redirect|proxy [flags] (cloister-mesh proxy --help lists them)"
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "-help") {
		fmt.Fprintln(os.Stderr, usage)
		return flag.ErrHelp
	}
	if len(os.Args) < 2 || (os.Args[1] != "redirect" && os.Args[1] != "proxy") {
		return errors.New(usage)
	}
	step := os.Args[1]
	cfg := mesh.Config{}
	fs := flag.NewFlagSet("cloister-mesh "+step, flag.ContinueOnError)
	fs.StringVar(&cfg.Ingress, "ingress", "", "the ingress annotation's value (name#port#disableTLS entries joined by ##; empty: mTLS on every port; DISABLED: no ingress proxy)")
	fs.StringVar(&cfg.Egress, "egress", "", "the egress annotation's value (name#127.x.y.z:port#host:port entries joined by ##)")
	fs.StringVar(&cfg.Certs, "certs", initenv.DefaultOut, "the folder of the workload certificate, key and mesh CA the initializer wrote")
	proxyPort := fs.Uint("proxy-port", mesh.DefaultProxyPort, "where the ingress proxy listens (the redirect's target)")
	adminPort := fs.Uint("admin-port", mesh.DefaultAdminPort, "the plain admin port: /healthz, /metrics")
	fs.IntVar(&cfg.MaxConnections, "max-connections", proxy.DefaultMaxConnections, "open connections per listener; one more is closed at once (counted as limited)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "end a connection neither side sent on for this long")
	log, err := startup.ParseFlags(fs, os.Args[2:], os.Stderr)
	if err != nil {
		return err
	}
	if cfg.MaxConnections < 1 || cfg.IdleTimeout < time.Second {
		return errors.New("--max-connections is at least 1 and --idle-timeout at least 1s")
	}
	for _, p := range []*uint{proxyPort, adminPort} {
		if *p == 0 || *p > 65535 {
			return errors.New("ports are 1-65535")
		}
	}
	cfg.ProxyPort, cfg.AdminPort = uint16(*proxyPort), uint16(*adminPort) //nolint:gosec // both checked to be 1-65535 above
	if step == "redirect" {
		return mesh.Redirect(cfg, log)
	}
	return mesh.Proxy(ctx, cfg, log)
}
