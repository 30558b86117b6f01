package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/deviceplugin/cex"
	"github.com/cloister-cc/cloister/internal/deviceplugin/dra"
	nitromode "github.com/cloister-cc/cloister/internal/deviceplugin/nitro"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
)

// draFlags are the flags of every DRA driver.
type draFlags struct {
	kubeletDir, cdiDir string
}

// draCommand runs a family's DRA driver instead of its device plugin.
func draCommand(c *common) *cobra.Command {
	f := &draFlags{}
	cmd := &cobra.Command{
		Use:   "dra FAMILY",
		Short: "Serve a Dynamic Resource Allocation driver instead of a device plugin: sgx, cex or nitro",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("name a family: sgx, cex or nitro")
		},
	}
	p := cmd.PersistentFlags()
	p.StringVar(&f.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root folder (plugins_registry and plugins are in it; the same path in the driver's container)")
	p.StringVar(&f.cdiDir, "cdi-dir", dra.DefaultCDIDir, "the container runtime's CDI spec folder")
	cmd.AddCommand(&cobra.Command{
		Use:   "sgx",
		Short: "Publish the SGX enclave device, with the node's EPC as capacity, and the provision device",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fam := &sgxmode.DRA{DevRoot: c.devRoot, SysRoot: c.sysRoot}
			if node, err := c.node(); err == nil {
				fam.Label = c.presence(node, sgxmode.Label)
				fam.EPC = &nodelabel.Capacity{Setter: node, Name: sgxmode.ResourceEPC, Log: c.log}
			}
			return c.serveDRA(cmd.Context(), f, fam, nil)
		},
	})
	cmd.AddCommand(draCEXCommand(c, f), draNitroCommand(c, f))
	return cmd
}

func draCEXCommand(c *common, f *draFlags) *cobra.Command {
	fam := &cex.DRA{}
	cmd := &cobra.Command{
		Use:   "cex",
		Short: "Publish every APQN of the node's IBM CryptoExpress adapters, with its mode, card, config set and master-key pattern",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fam.SysRoot, fam.DevRoot, fam.SysinfoPath, fam.Log = c.sysRoot, c.devRoot, c.sysinfo, c.log
			if err := fam.Init(); err != nil {
				return err
			}
			return c.serveDRA(cmd.Context(), f, fam, c.apEvents(cmd.Context()))
		},
	}
	cmd.Flags().IntVar(&fam.Overcommit, "overcommit", 1, "claims that may share one APQN, 1..100")
	cmd.Flags().StringVar(&fam.ConfigPath, "config-sets", "", "crypto config sets file (JSON or YAML): only their APQNs are published, each naming its set; reloaded when it changes")
	return cmd
}

func draNitroCommand(c *common, f *draFlags) *cobra.Command {
	fam := &nitromode.DRA{}
	cmd := &cobra.Command{
		Use:   "nitro",
		Short: "Publish the node's Nitro Enclaves device, with its enclave slots, CPU pool and hugepages as capacity",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fam.Enclaves < nitromode.MinEnclaves || fam.Enclaves > nitromode.MaxEnclaves {
				return fmt.Errorf("--enclaves %d is out of range: use %d..%d (Nitro's limit per instance)", fam.Enclaves, nitromode.MinEnclaves, nitromode.MaxEnclaves)
			}
			fam.DevRoot, fam.SysRoot = c.devRoot, c.sysRoot
			if node, err := c.node(); err == nil {
				fam.Label = c.presence(node, nitromode.Label)
			}
			return c.serveDRA(cmd.Context(), f, fam, nil)
		},
	}
	cmd.Flags().IntVar(&fam.Enclaves, "enclaves", nitromode.MaxEnclaves, "enclaves per node, 1..4")
	return cmd
}

// serveDRA runs a family's driver and the metrics endpoint until ctx
// ends; rescan (may be nil) asks for extra scans.
func (c *common) serveDRA(ctx context.Context, f *draFlags, fam dra.Family, rescan <-chan struct{}) error {
	node, err := c.node()
	if err != nil {
		return err
	}
	d := &dra.Driver{
		Family: fam, NodeName: node.Name, Client: node.Client, KubeletDir: f.kubeletDir, CDIDir: f.cdiDir,
		RescanInterval: c.rescan, Rescan: rescan, Log: c.log.With("driver", fam.Driver()), Metrics: dra.NewMetrics(fam.Driver()),
	}
	if c.metricsAddress != "" {
		lis, err := net.Listen("tcp", c.metricsAddress)
		if err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
		srv := &http.Server{Handler: plugin.Handler(d.Metrics.Registry, d.Ready), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		defer func() { _ = srv.Close() }()
		c.log.Info("serving metrics", "address", lis.Addr().String())
	}
	v := version.Get()
	c.log.Info("starting cloister-device-plugin", "driver", fam.Driver(), "version", v.Version, "commit", v.Commit, "kubeletDir", f.kubeletDir, "cdiDir", f.cdiDir)
	return d.Run(ctx)
}
