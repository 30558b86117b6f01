package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/devcluster"
	"github.com/cloister-cc/cloister/internal/toolchain"
)

func newDev(s Streams) *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run a local Kubernetes cluster with simulated TEE nodes",
		Long: "dev runs a real control plane (etcd, kube-apiserver, kube-controller-manager,\n" +
			"kube-scheduler) built from pinned Go modules, with simulated nodes labelled\n" +
			"cloister.dev/tee=sgx|snp|tdx|nitro|cex and the extended resources of Cloister's\n" +
			"device plugins. No container engine is needed; everything binds to 127.0.0.1.",
	}
	dev.AddCommand(newDevUp(s), newDevDown(s), newDevKubeconfig(s), newDevTools(s))
	return dev
}

// devFlags are shared by the dev subcommands.
type devFlags struct {
	name    string
	verbose bool
}

func (f *devFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", devcluster.DefaultName, "name of the dev cluster")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "show kwokctl and build output")
}

// cluster resolves the toolchain and the cluster the flags name.
func (f *devFlags) cluster(s Streams) (*devcluster.Cluster, *toolchain.Toolchain, error) {
	if err := devcluster.ValidateName(f.name); err != nil {
		return nil, nil, err
	}
	tc, err := toolchain.Locate()
	if err != nil {
		return nil, nil, err
	}
	var log io.Writer
	if f.verbose {
		log = s.Err
	}
	return &devcluster.Cluster{
		Name:    f.name,
		Workdir: filepath.Join(tc.CacheRoot, "kwok"),
		Tools:   tc,
		Log:     log,
	}, tc, nil
}

func newDevUp(s Streams) *cobra.Command {
	var f devFlags
	var nodes int
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create or start the dev cluster and converge its nodes (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := devcluster.ValidateNodes(nodes); err != nil {
				return err
			}
			c, tc, err := f.cluster(s)
			if err != nil {
				return err
			}
			if err := tc.Ensure(cmd.Context(), s.Err); err != nil {
				return err
			}
			fmt.Fprintf(s.Err, "starting dev cluster %q with %d nodes...\n", c.Name, nodes)
			st, err := c.Up(cmd.Context(), nodes)
			if err != nil {
				return err
			}
			fmt.Fprintln(s.Out, st.Kubeconfig)
			fmt.Fprintln(s.Err, st.SummaryLine(c.Name))
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&nodes, "nodes", devcluster.DefaultNodes,
		fmt.Sprintf("number of simulated nodes, 1 to %d", devcluster.MaxNodes))
	return cmd
}

func newDevDown(s Streams) *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the dev cluster and remove everything it created",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := f.cluster(s)
			if err != nil {
				return err
			}
			removed, err := c.Down(cmd.Context())
			if err != nil {
				return err
			}
			if removed {
				fmt.Fprintf(s.Err, "dev cluster %q removed\n", c.Name)
			} else {
				fmt.Fprintf(s.Err, "dev cluster %q does not exist; nothing to do\n", c.Name)
			}
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newDevKubeconfig(s Streams) *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:     "kubeconfig",
		Short:   "Print the path of the dev cluster's kubeconfig",
		Example: "  export KUBECONFIG=$(cloister dev kubeconfig)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := f.cluster(s)
			if err != nil {
				return err
			}
			if !c.Exists() {
				return fmt.Errorf("dev cluster %q does not exist; run `cloister dev up --name %s`", c.Name, c.Name)
			}
			_, err = fmt.Fprintln(s.Out, c.KubeconfigPath())
			return err
		},
	}
	f.register(cmd)
	return cmd
}

func newDevTools(s Streams) *cobra.Command {
	var realNode bool
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "Build the pinned Kubernetes binaries if needed and print their folder",
		Long: "tools builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler,\n" +
			"kubectl, kwok, kwokctl and controller-gen " + toolchain.KubeVersion + " from the hack/tools Go\n" +
			"module into the cache, unless they are there already, and prints the folder\n" +
			"(usable as KUBEBUILDER_ASSETS). With --real-node it also builds the kubelet and,\n" +
			"from hack/nodetools, containerd, its runc shim and the CNI plugins, and prints\n" +
			"their folders too.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, err := toolchain.Locate()
			if err != nil {
				return err
			}
			chains := []*toolchain.Toolchain{tc}
			if realNode {
				kubelet, runtime := tc.Node()
				chains = append(chains, kubelet, runtime)
			}
			for _, c := range chains {
				if err := c.Ensure(cmd.Context(), s.Err); err != nil {
					return err
				}
				if _, err := fmt.Fprintln(s.Out, c.BinDir); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&realNode, "real-node", false, "also build what a real node runs (kubelet, containerd, CNI plugins)")
	return cmd
}
