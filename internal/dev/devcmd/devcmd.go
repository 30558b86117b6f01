// Package devcmd owns the `cloister dev` commands: the dev cluster (up,
// down, kubeconfig, tools, operator-flags) and the hidden
// programs its parts run from the cluster's copy of cloister (the API
// server's egress proxy, the real node's API server proxy and storage
// provisioner).
package devcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/cloister-cc/cloister/internal/base/kubeconfig"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/cluster/egress"
	"github.com/cloister-cc/cloister/internal/dev/realnode"
	"github.com/cloister-cc/cloister/internal/dev/realnode/clusterdns"
	"github.com/cloister-cc/cloister/internal/dev/realnode/provisioner"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

// Streams are where a command writes: results to Out, progress and
// diagnostics to Err.
type Streams struct {
	Out, Err io.Writer
}

// New builds the `dev` command; more subcommands may be added to it.
func New(s Streams) *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run a local Kubernetes cluster with simulated TEE nodes",
		Long: "dev runs a real control plane (etcd, kube-apiserver, kube-controller-manager,\n" +
			"kube-scheduler) built from pinned Go modules, with simulated nodes labelled\n" +
			"cloister.dev/tee=sgx|snp|tdx|nitro|cex and the extended resources of Cloister's\n" +
			"device plugins. No container engine is needed; everything binds to 127.0.0.1.",
	}
	dev.AddCommand(newDevUp(s), newDevDown(s), newDevKubeconfig(s), newDevTools(s), newDevOperatorFlags(s), newDevAPIServerProxy(s), newDevEgressProxy(s), newDevStorageProvisioner(s), newDevClusterDNS(s))
	return dev
}

// ClusterFlags name the dev cluster a command works on.
type ClusterFlags struct {
	name    string
	verbose bool
}

func (f *ClusterFlags) Register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", cluster.DefaultName, "name of the dev cluster")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "show kwokctl and build output")
}

// Cluster resolves the toolchain and the cluster the flags name.
func (f *ClusterFlags) Cluster(s Streams) (*cluster.Cluster, *toolchain.Toolchain, error) {
	if err := cluster.ValidateName(f.name); err != nil {
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
	self, err := Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("finding the cloister binary: %w", err)
	}
	return &cluster.Cluster{
		Name:    f.name,
		Workdir: filepath.Join(tc.CacheRoot, "kwok"),
		Tools:   tc,
		Self:    self,
		Log:     log,
	}, tc, nil
}

func newDevUp(s Streams) *cobra.Command {
	var f ClusterFlags
	var nodes int
	var realNode bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create or start the dev cluster and converge its nodes (idempotent)",
		Long: "up creates the dev cluster, or starts it again, and converges its simulated nodes.\n" +
			"With --real-node (as root) it also runs one real worker node on this machine: a\n" +
			"kubelet with containerd and runc, Cloister's images (make images) and fake TEE\n" +
			"device nodes, so Cloister's pods really run. A real node made once is started\n" +
			"again by every later up; down removes it with the cluster.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cluster.ValidateNodes(nodes); err != nil {
				return err
			}
			c, tc, err := f.Cluster(s)
			if err != nil {
				return err
			}
			if err := tc.Ensure(cmd.Context(), s.Err); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(s.Err, "starting dev cluster %q with %d nodes...\n", c.Name, nodes)
			st, err := c.Up(cmd.Context(), nodes)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintln(s.Out, st.Kubeconfig)
			_, _ = fmt.Fprintln(s.Err, st.SummaryLine(c.Name))
			existing, err := c.RealNode(cluster.RealNodeTools{})
			if err != nil {
				return err
			}
			if !realNode && !existing.Exists() {
				return nil
			}
			return upRealNode(cmd.Context(), s, c, tc)
		},
	}
	f.Register(cmd)
	cmd.Flags().IntVar(&nodes, "nodes", cluster.DefaultNodes,
		fmt.Sprintf("number of simulated nodes, 1 to %d", cluster.MaxNodes))
	cmd.Flags().BoolVar(&realNode, "real-node", false, "also run a real worker node on this machine (needs root)")
	return cmd
}

// upRealNode builds the node's tools if needed and brings the real node
// up. Without root or runc it says why and leaves the simulated nodes
// working.
func upRealNode(ctx context.Context, s Streams, c *cluster.Cluster, tc *toolchain.Toolchain) error {
	if os.Geteuid() != 0 {
		_, _ = fmt.Fprintf(s.Err, "no real node: %v\n", realnode.ErrNotRoot)
		return nil
	}
	if err := realnode.HostTools(); err != nil {
		_, _ = fmt.Fprintf(s.Err, "no real node: %v\n", err)
		return nil
	}
	kubelet, runtime := tc.Node()
	for _, t := range []*toolchain.Toolchain{kubelet, runtime} {
		if err := t.Ensure(ctx, s.Err); err != nil {
			return err
		}
	}
	images, err := filepath.Glob(filepath.Join(tc.CacheRoot, "images", "*.tar"))
	if err != nil || len(images) == 0 {
		return fmt.Errorf("no images in %s for the real node; run `make images` first", filepath.Join(tc.CacheRoot, "images"))
	}
	_, _ = fmt.Fprintf(s.Err, "starting real node %q...\n", cluster.RealNodeName)
	start := time.Now()
	node, err := c.UpRealNode(ctx, cluster.RealNodeTools{Kubelet: kubelet.Path(toolchain.Kubelet.Name), RuntimeDir: runtime.BinDir, Images: images})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(s.Err, "real node %q Ready at %s in %s (kubelet %s, %s)\n", node.Name, internalIP(node),
		time.Since(start).Round(10*time.Millisecond), node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion)
	return nil
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return "?"
}

func newDevDown(s Streams) *cobra.Command {
	var f ClusterFlags
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the dev cluster and remove everything it created",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := f.Cluster(s)
			if err != nil {
				return err
			}
			removed, err := c.Down(cmd.Context())
			if err != nil {
				return err
			}
			if removed {
				_, _ = fmt.Fprintf(s.Err, "dev cluster %q removed\n", c.Name)
			} else {
				_, _ = fmt.Fprintf(s.Err, "dev cluster %q does not exist; nothing to do\n", c.Name)
			}
			return nil
		},
	}
	f.Register(cmd)
	return cmd
}

func newDevKubeconfig(s Streams) *cobra.Command {
	var f ClusterFlags
	cmd := &cobra.Command{
		Use:     "kubeconfig",
		Short:   "Print the path of the dev cluster's kubeconfig",
		Example: "  export KUBECONFIG=$(cloister dev kubeconfig)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := f.Cluster(s)
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
	f.Register(cmd)
	return cmd
}

func newDevTools(s Streams) *cobra.Command {
	var realNode, lint, vault, helm bool
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "Build the pinned Kubernetes binaries if needed and print their folder",
		Long: "tools builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler,\n" +
			"kubectl, kwok, kwokctl and controller-gen " + toolchain.KubeVersion + " from the hack/tools Go\n" +
			"module into the cache, unless they are there already, and prints the folder\n" +
			"(usable as KUBEBUILDER_ASSETS). With --real-node it also builds the kubelet and,\n" +
			"from hack/nodetools, containerd, its runc shim and the CNI plugins, and prints\n" +
			"their folders too; with --lint, golangci-lint from hack/linttools; with --vault, the\n" +
			"Vault server of hack/vaulttools (the dev cluster's Vault image); with --helm, the Helm\n" +
			"CLI of hack/helmtools (the end-to-end tests install the chart with it); each one's\n" +
			"folder after.",
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
			if lint {
				chains = append(chains, tc.Linter())
			}
			if vault {
				chains = append(chains, tc.VaultServer())
			}
			if helm {
				chains = append(chains, tc.HelmCLI())
			}
			// The others' modules download while the first compiles.
			wait := toolchain.DownloadAhead(cmd.Context(), chains, s.Err)
			defer wait()
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
	cmd.Flags().BoolVar(&lint, "lint", false, "also build golangci-lint (make lint runs it)")
	cmd.Flags().BoolVar(&vault, "vault", false, "also build the Vault server (make images packs it)")
	cmd.Flags().BoolVar(&helm, "helm", false, "also build the Helm CLI (make test's end-to-end tests use it)")
	return cmd
}

// newDevAPIServerProxy is what the real node's static pod runs: pods there
// reach the API server (bound to 127.0.0.1) through it.
func newDevAPIServerProxy(s Streams) *cobra.Command {
	var listen, upstream string
	cmd := &cobra.Command{
		Use:    "apiserver-proxy",
		Short:  "Forward TCP connections from the real node's Service address to the API server",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			_, _ = fmt.Fprintf(s.Err, "forwarding %s to %s\n", l.Addr(), upstream)
			return realnode.ProxyTCP(cmd.Context(), l, upstream)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to accept connections on")
	cmd.Flags().StringVar(&upstream, "upstream", "", "address to forward them to")
	_ = cmd.MarkFlagRequired("listen")
	_ = cmd.MarkFlagRequired("upstream")
	return cmd
}

// Executable is the cloister binary the dev cluster's egress proxy runs
// from (copied into the cluster); tests that run this command tree in
// their own process point it at a built cloister.
var Executable = os.Executable

// newDevEgressProxy is what the dev cluster's API server sends its traffic
// for nodes, pods and webhooks through (see egress).
func newDevEgressProxy(s Streams) *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:    "egress-proxy",
		Short:  "Connect the dev cluster's API server to destinations on this machine only",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A socket left by a crashed proxy; the cluster's folder is ours.
			if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("--socket: %w", err)
			}
			old := syscall.Umask(0o177)
			l, err := net.Listen("unix", socket)
			syscall.Umask(old)
			if err != nil {
				return fmt.Errorf("--socket: %w", err)
			}
			_, _ = fmt.Fprintf(s.Err, "egress proxy on %s: connecting to this machine's addresses only\n", socket)
			return (&egress.Proxy{Log: slog.New(slog.NewTextHandler(s.Err, nil))}).Serve(cmd.Context(), l)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "unix socket to accept CONNECT requests on")
	_ = cmd.MarkFlagRequired("socket")
	return cmd
}

func newDevStorageProvisioner(s Streams) *cobra.Command {
	var kubeconfigPath, dir, node string
	cmd := &cobra.Command{
		Use:    "storage-provisioner",
		Short:  "Provision the real node's claims as local volumes in a folder of the node",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := clientset(kubeconfigPath)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(s.Err, "provisioning %s volumes of node %s in %s\n", realnode.StorageProvisioner, node, dir)
			pc := controller.NewProvisionController(cmd.Context(), cs, realnode.StorageProvisioner,
				&provisioner.LocalStorage{Dir: dir, Node: node}, controller.LeaderElection(false))
			pc.Run(cmd.Context())
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfigPath, "kubeconfig", "", "the provisioner's kubeconfig")
	cmd.Flags().StringVar(&dir, "dir", "", "the node's folder of volumes")
	cmd.Flags().StringVar(&node, "node", "", "the node's name")
	for _, f := range []string{"kubeconfig", "dir", "node"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// clientset is a static pod's client, from its own kubeconfig.
func clientset(kubeconfigPath string) (kubernetes.Interface, error) {
	cfg, err := kubeconfig.RESTConfig(kubeconfigPath, "")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// newDevClusterDNS is what the real node's DNS static pod runs.
func newDevClusterDNS(s Streams) *cobra.Command {
	var kubeconfigPath, listen, domain string
	var served []string
	cmd := &cobra.Command{
		Use:    "cluster-dns",
		Short:  "Answer the real node's pods the cluster names of Services and their pods",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := &clusterdns.Resolver{Domain: domain}
			for _, ip := range served {
				a, err := netip.ParseAddr(ip)
				if err != nil {
					return fmt.Errorf("--served-ip: %w", err)
				}
				r.Served = append(r.Served, a)
			}
			cs, err := clientset(kubeconfigPath)
			if err != nil {
				return err
			}
			if r.Source, err = clusterdns.Watch(cmd.Context(), cs); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(s.Err, nil))
			return clusterdns.Serve(cmd.Context(), listen, &clusterdns.Handler{Resolver: r, Log: log}, func(udp, _ net.Addr) {
				log.Info("answering the cluster's names; nothing is forwarded", "listen", udp.String(), "domain", domain)
			})
		},
	}
	cmd.Flags().StringVar(&kubeconfigPath, "kubeconfig", "", "the DNS server's kubeconfig")
	cmd.Flags().StringVar(&listen, "listen", "", "address to answer at (UDP and TCP)")
	cmd.Flags().StringVar(&domain, "domain", realnode.ClusterDomain, "the cluster's DNS domain")
	cmd.Flags().StringArrayVar(&served, "served-ip", nil, "a cluster IP the node answers at itself (repeatable)")
	for _, f := range []string{"kubeconfig", "listen"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func newDevOperatorFlags(s Streams) *cobra.Command {
	var f ClusterFlags
	cmd := &cobra.Command{
		Use:   "operator-flags",
		Short: "Print the flags of a cloister-operator run beside the dev cluster",
		Long: "operator-flags prints, one per line, the --host-* flags that point a cloister-operator\n" +
			"run beside the cluster at the real node's fake TEE devices and kubelet folder; nothing\n" +
			"without a real node. cloister install needs none: it reads them from the cluster.",
		Example: "  cloister-operator $(cloister dev operator-flags)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := f.Cluster(s)
			if err != nil {
				return err
			}
			n, err := c.RealNode(cluster.RealNodeTools{})
			if err != nil || !n.Exists() {
				return err
			}
			_, err = fmt.Fprintf(s.Out, "--host-dev-dir=%s\n--host-kubelet-dir=%s\n--host-aesm-dir=%s\n--host-sys-dir=%s\n--host-cdi-dir=%s\n", n.DevicesDir(), n.KubeletRootDir(), n.AESMDir(), n.SysDir(), n.CDIDir())
			return err
		},
	}
	f.Register(cmd)
	return cmd
}
