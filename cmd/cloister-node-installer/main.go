// Command cloister-node-installer adds a ConfidentialRuntime's handler to
// its node's containerd; see internal/workload/nodeinstaller.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/workload/nodeinstaller"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

func main() { startup.Main("cloister-node-installer", run) }

func run(ctx context.Context) error {
	var cfg nodeinstaller.Config
	var platform string
	fs := flag.NewFlagSet("cloister-node-installer", flag.ContinueOnError)
	fs.StringVar(&platform, "platform", "", "the platform of the handler: sim, snp or tdx")
	fs.StringVar(&cfg.Handler, "handler", "", "the runtime handler's name (the RuntimeClass's)")
	fs.StringVar(&cfg.Root, "host-root", "/host", "where the host's folders are mounted")
	fs.StringVar(&cfg.ConfigPath, "containerd-config", runtimeclass.DefaultConfigPath, "containerd's configuration on the host")
	fs.StringVar(&cfg.Socket, "containerd-socket", runtimeclass.DefaultSocket, "containerd's socket on the host")
	fs.BoolVar(&cfg.Remove, "remove", false, "take the handler out of containerd instead of adding it")
	fs.StringVar(&cfg.Probe, "probe-address", ":8080", "address of /readyz, ready once the handler is in place (or gone)")
	fs.StringVar(&cfg.TerminationLog, "termination-log", "/dev/termination-log", "file for the reason of a failure")
	fs.DurationVar(&cfg.Timeout, "containerd-timeout", time.Minute, "how long to wait for containerd to stop, and to answer again")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	if cfg.Platform, err = runtimeclass.ParsePlatform(platform); err != nil {
		return err
	}
	if cfg.Handler == "" {
		return fmt.Errorf("no runtime handler name given")
	}
	if node := os.Getenv("NODE_NAME"); node != "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("reaching the API server to label node %s: %w", node, err)
		}
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		cfg.Node = &nodelabel.Node{Client: c, Name: node}
	}
	return nodeinstaller.Run(ctx, cfg, log)
}
