// Package deviceplugin is the cloister-device-plugin command line: one binary, a
// subcommand per mode, every host path a flag.
//
// Its folder is the device plugin subsystem: plugin (the kubelet
// device-plugin framework) and the sgx, cex and nitro modes on it.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/deviceplugin/cex"
	nitromode "github.com/cloister-cc/cloister/internal/deviceplugin/nitro"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
	"github.com/cloister-cc/cloister/internal/deviceplugin/uevent"
)

// common are the flags of every mode.
type common struct {
	devRoot, sysRoot, pluginDir, podResources, sysinfo string
	rescan                                             time.Duration
	metricsAddress, logLevel                           string
	offerNone                                          bool
	log                                                *slog.Logger
}

// NewCommand builds the command; run it with ExecuteContext so a
// cancelled context (SIGTERM in main) stops the plugin cleanly.
func NewCommand() *cobra.Command {
	c := &common{}
	root := &cobra.Command{
		Use:           "cloister-device-plugin MODE",
		Short:         "Kubelet device plugin for SGX, IBM CryptoExpress and AWS Nitro Enclaves",
		Version:       version.Get().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("name a mode: sgx, cex or nitro")
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&c.devRoot, "dev-root", "/dev", "where the host's device nodes are (as the plugin sees them; also the host path handed to kubelet)")
	f.StringVar(&c.sysRoot, "sys-root", "/sys", "where the host's sysfs is")
	f.StringVar(&c.pluginDir, "plugin-dir", plugin.DefaultPluginDir, "kubelet's device-plugin directory (kubelet.sock is in it)")
	f.StringVar(&c.podResources, "pod-resources-socket", plugin.DefaultPodResourcesSocket, "kubelet's pod-resources API, to learn which devices are in use; empty disables")
	f.StringVar(&c.sysinfo, "proc-sysinfo", "/proc/sysinfo", "the s390 machine description (cex config sets' machineID)")
	f.DurationVar(&c.rescan, "rescan-interval", plugin.DefaultRescanInterval, "period of full rescans; filesystem events rescan at once")
	f.StringVar(&c.metricsAddress, "metrics-address", ":9401", "address of /metrics, /healthz and /readyz; empty disables")
	f.BoolVar(&c.offerNone, "offer-none", false, "register no resource with the kubelet (the DRA driver owns the devices during a migration); keep labelling the node and releasing what the containers that hold devices no longer use")
	f.StringVar(&c.logLevel, startup.LogLevelFlag, startup.LogLevelDefault, startup.LogLevelUsage)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		level, err := startup.ParseLogLevel(c.logLevel)
		if err != nil {
			return err
		}
		if c.rescan < time.Second {
			return fmt.Errorf("--rescan-interval %v is too short: use 1s or more", c.rescan)
		}
		c.log = startup.Logger(cmd.ErrOrStderr(), level)
		return nil
	}
	root.AddCommand(sgxCommand(c), cexCommand(c), nitroCommand(c), draCommand(c))
	return root
}

func sgxCommand(c *common) *cobra.Command {
	var capacity int
	cmd := &cobra.Command{
		Use:   "sgx",
		Short: "Offer sgx.cloister.dev/enclave and sgx.cloister.dev/provision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node, nodeErr := c.node()
			if !cmd.Flags().Changed("capacity") {
				capacity = c.maxPods(cmd.Context(), node, nodeErr)
			}
			m := &sgxmode.Mode{DevRoot: c.devRoot, Capacity: capacity, Label: c.presence(node, sgxmode.Label), SysRoot: c.sysRoot, NoEPC: c.offerNone}
			if node != nil {
				m.EPC = &nodelabel.Capacity{Setter: node, Name: sgxmode.ResourceEPC, Log: c.log}
			}
			if err := m.Validate(); err != nil {
				return err
			}
			return c.serve(cmd.Context(), "sgx", m, nil)
		},
	}
	cmd.Flags().IntVar(&capacity, "capacity", 0, "SGX devices per resource, 1..10000 (capacitySGXPods); default: the node's maximum number of pods")
	return cmd
}

func cexCommand(c *common) *cobra.Command {
	m := &cex.Mode{}
	var typ string
	cmd := &cobra.Command{
		Use:   "cex",
		Short: "Offer the APQNs of IBM CryptoExpress adapters as ibm.com/cex-<type>",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("cex-type") && os.Getenv("CEXTYPE") != "" {
				typ = os.Getenv("CEXTYPE")
			}
			t, err := cex.ParseType(typ)
			if err != nil {
				return err
			}
			m.Type, m.SysRoot, m.DevRoot, m.SysinfoPath, m.Log = t, c.sysRoot, c.devRoot, c.sysinfo, c.log
			if err := m.Init(); err != nil {
				return err
			}
			return c.serve(cmd.Context(), "cex", m, c.apEvents(cmd.Context()))
		},
	}
	cmd.Flags().StringVarP(&typ, "cex-type", "t", "ep11", "adapter mode to offer: ep11, cca or accel (or $CEXTYPE)")
	cmd.Flags().IntVar(&m.Overcommit, "overcommit", 1, "containers that may share one APQN, 1..100")
	cmd.Flags().StringVar(&m.ConfigPath, "config-sets", "", "crypto config sets file (JSON or YAML); reloaded when it changes")
	cmd.Flags().DurationVar(&m.ReleaseGrace, "release-grace", cex.DefaultReleaseGrace, "how long a zcrypt node no container uses is kept")
	return cmd
}

func nitroCommand(c *common) *cobra.Command {
	m := &nitromode.Mode{}
	cmd := &cobra.Command{
		Use:   "nitro",
		Short: "Offer aws.ec2.nitro/nitro_enclaves (and nitro_enclaves_cpus)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node, _ := c.node()
			m.DevRoot, m.SysRoot, m.Label = c.devRoot, c.sysRoot, c.presence(node, nitromode.Label)
			if err := m.Validate(); err != nil {
				return err
			}
			return c.serve(cmd.Context(), "nitro", m, nil)
		},
	}
	cmd.Flags().IntVar(&m.Enclaves, "enclaves", nitromode.MaxEnclaves, "enclaves per node, 1..4")
	cmd.Flags().BoolVar(&m.CPUs, "enclave-cpus", false, "also offer the host's offline CPUs as aws.ec2.nitro/nitro_enclaves_cpus")
	return cmd
}

// apEvents asks for rescans on AP bus uevents: sysfs raises no inotify
// events for the kernel's own changes, so CryptoExpress hot plugs and
// on/offlining arrive so. Without them (nil), periodic rescans only.
func (c *common) apEvents(ctx context.Context) <-chan struct{} {
	events, err := uevent.Listen(ctx, "ap")
	if err != nil {
		c.log.Warn("hot plug noticed by periodic rescans only", "error", err)
	}
	return events
}

// node is the plugin's node in the API server: NODE_NAME (downward API)
// and in-cluster credentials or $KUBECONFIG.
func (c *common) node() (*nodelabel.Node, error) {
	name := os.Getenv("NODE_NAME")
	if name == "" {
		return nil, errors.New("NODE_NAME is not set (give it from the downward API: spec.nodeName)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("finding the cluster: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &nodelabel.Node{Client: cs, Name: name}, nil
}

func (c *common) presence(node *nodelabel.Node, key string) *nodelabel.Presence {
	if node == nil {
		c.log.Warn("not labelling the node: no access to it", "label", key)
		return nil
	}
	return &nodelabel.Presence{Labeler: node, Key: key, Log: c.log}
}

// maxPods is sgx's default capacity; kubelet's default when unknown.
func (c *common) maxPods(ctx context.Context, node *nodelabel.Node, nodeErr error) int {
	const kubeletDefault = 110
	if node == nil {
		c.log.Warn("capacity: using kubelet's default maximum of pods", "capacity", kubeletDefault, "reason", nodeErr)
		return kubeletDefault
	}
	n, err := node.MaxPods(ctx)
	if err != nil {
		c.log.Warn("capacity: using kubelet's default maximum of pods", "capacity", kubeletDefault, "error", err)
		return kubeletDefault
	}
	return int(min(n, sgxmode.MaxCapacity))
}

// serve runs the mode and the metrics endpoint until ctx ends; rescan
// (may be nil) asks for extra scans.
func (c *common) serve(ctx context.Context, mode string, m plugin.Mode, rescan <-chan struct{}) error {
	mgr := &plugin.Manager{
		Mode: m, PluginDir: c.pluginDir, RescanInterval: c.rescan, PodResourcesSocket: c.podResources, Rescan: rescan, Drain: c.offerNone,
		Metrics: plugin.NewMetrics(), Log: c.log.With("mode", mode),
	}
	if c.metricsAddress != "" {
		lis, err := net.Listen("tcp", c.metricsAddress)
		if err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
		srv := &http.Server{Handler: mgr.Metrics.Handler(mgr.Ready), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		defer func() { _ = srv.Close() }()
		c.log.Info("serving metrics", "address", lis.Addr().String())
	}
	v := version.Get()
	c.log.Info("starting cloister-device-plugin", "mode", mode, "version", v.Version, "commit", v.Commit, "pluginDir", c.pluginDir)
	return mgr.Run(ctx)
}
