// Package cluster owns the local development cluster: a real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler started by
// kwokctl's binary runtime from the pinned toolchain, with simulated nodes
// that look like TEE hosts (labels and the extended resources Cloister's
// device plugins register). No container engine is needed.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cloister-cc/cloister/internal/dev/cluster/devinfo"
	"github.com/cloister-cc/cloister/internal/dev/cluster/hostnet"
	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

// Defaults of `cloister dev up`.
const (
	DefaultName  = "cloister"
	DefaultNodes = 5
)

// Tools locates the binaries the cluster runs.
type Tools interface {
	Path(name string) string
}

// Cluster is one named local cluster. Its files live in
// Workdir/clusters/Name (kwokctl's layout, KWOK_WORKDIR=Workdir).
type Cluster struct {
	Name    string
	Workdir string
	Tools   Tools
	// Self is the cloister binary: the cluster's egress proxy runs from a
	// copy of it.
	Self string
	// Host is the host's routing; nil is this process's network namespace.
	Host *hostnet.Host
	// Log receives kwokctl's output and progress; nil discards it.
	Log io.Writer
}

func (c *Cluster) host() *hostnet.Host {
	if c.Host == nil {
		return &hostnet.Host{}
	}
	return c.Host
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidateName reports why name cannot name a cluster, or nil.
func ValidateName(name string) error {
	if len(name) > 40 || !nameRE.MatchString(name) {
		return fmt.Errorf("invalid --name %q: use 1 to 40 lowercase letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// ValidateNodes reports why n cannot be a node count, or nil.
func ValidateNodes(n int) error {
	if n < 1 || n > MaxNodes {
		return fmt.Errorf("invalid --nodes %d: a dev cluster has 1 to %d nodes (default %d)", n, MaxNodes, DefaultNodes)
	}
	return nil
}

// Dir is the cluster's kwokctl folder: PKI, etcd data, logs, pids, kubeconfig.
func (c *Cluster) Dir() string { return filepath.Join(c.Workdir, "clusters", c.Name) }

// KubeconfigPath is the admin kubeconfig of the cluster.
func (c *Cluster) KubeconfigPath() string { return filepath.Join(c.Dir(), "kubeconfig.yaml") }

func (c *Cluster) configPath() string {
	return filepath.Join(c.Workdir, c.Name+".kwokctl.yaml")
}

// Exists reports whether the cluster has been created (and not deleted).
func (c *Cluster) Exists() bool {
	_, err := os.Stat(c.KubeconfigPath())
	return err == nil
}

// RESTConfig is a client configuration for the cluster, with rate limits
// raised so creating a thousand nodes is not throttled client-side.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	if !c.Exists() {
		return nil, fmt.Errorf("cluster %q does not exist; run `cloister dev up --name %s`", c.Name, c.Name)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig of cluster %q: %w", c.Name, err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg, nil
}

// Status is what Up brought up.
type Status struct {
	Nodes      []corev1.Node
	Kubeconfig string
	Elapsed    time.Duration
}

// SummaryLine is the one-line report `dev up` prints.
func (s *Status) SummaryLine(name string) string {
	return fmt.Sprintf("cluster %q ready: %d nodes Ready (%s) in %s; kubeconfig %s",
		name, len(s.Nodes), Summary(s.Nodes), s.Elapsed.Round(10*time.Millisecond), s.Kubeconfig)
}

// Up creates the cluster, or starts it again if its processes are gone, and
// converges its simulated nodes to exactly n, then waits until all are Ready.
// Running it again with the same n changes nothing.
func (c *Cluster) Up(ctx context.Context, n int) (*Status, error) {
	if err := ValidateName(c.Name); err != nil {
		return nil, err
	}
	if err := ValidateNodes(n); err != nil {
		return nil, err
	}
	start := time.Now()
	if c.Exists() {
		if err := c.checkEgress(); err != nil {
			return nil, err
		}
	}
	if err := c.acquireHostNetwork(c.host()); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	if err := c.installSelf(); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return nil, fmt.Errorf("starting control plane of cluster %q: %w\n%s", c.Name, err, c.logTails("etcd", "kube-apiserver"))
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating client for cluster %q: %w", c.Name, err)
	}
	if err := waitAPIServer(ctx, cs); err != nil {
		return nil, fmt.Errorf("cluster %q: %w\n%s", c.Name, err, c.logTails("etcd", "kube-apiserver"))
	}
	c.progress(start, "control plane ready")
	if err := reconcileNodes(ctx, cs, n); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	c.progress(start, "%d nodes converged", n)
	nodes, err := waitNodesReady(ctx, cs, n)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w\n%s", c.Name, err, c.logTails("kwok-controller"))
	}
	c.progress(start, "%d nodes Ready", n)
	if err := waitDefaultServiceAccount(ctx, cs); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	// A real node made before is started again by the caller (UpRealNode),
	// which writes its own description.
	if rn, err := c.RealNode(RealNodeTools{}); err != nil || !rn.Exists() {
		if err := writeDevInfo(ctx, cs, devinfo.Info{}); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
	}
	return &Status{Nodes: nodes, Kubeconfig: c.KubeconfigPath(), Elapsed: time.Since(start)}, nil
}

// startControlPlane creates the cluster if needed, then (re)starts every
// component that is not running until all are. `kwokctl create` on an
// existing cluster whose processes were killed hangs in kwokctl v0.8.0, so
// an existing cluster is only ever started.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	if !c.Exists() {
		if err := c.writeConfig(); err != nil {
			return err
		}
		if err := c.kwokctl(ctx, "create", "cluster", "--name", c.Name, "--config", c.configPath(),
			"--kubeconfig", "", "--quiet-pull", "--timeout", "5m"); err != nil {
			return err
		}
	}
	var stopped []string
	for range 3 {
		var err error
		if stopped, err = c.clearStalePIDFiles(); err != nil {
			return fmt.Errorf("checking processes: %w", err)
		}
		if len(stopped) == 0 {
			return nil
		}
		_, _ = fmt.Fprintf(c.log(), "dev cluster %q: starting %s\n", c.Name, strings.Join(stopped, ", "))
		if err := c.kwokctl(ctx, "start", "cluster", "--name", c.Name, "--timeout", "2m"); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s stopped again each time they were started", strings.Join(stopped, ", "))
}

// Down stops every process of the cluster and removes its files. A cluster
// that does not exist is not an error: Down reports whether it removed one.
func (c *Cluster) Down(ctx context.Context) (bool, error) {
	if err := ValidateName(c.Name); err != nil {
		return false, err
	}
	// The real node first: its kubelet would otherwise outlive the API
	// server, and its folder holds mounts that must go before files do.
	realNode, err := c.RealNode(RealNodeTools{})
	if err != nil {
		return false, err
	}
	hadRealNode := realNode.Exists()
	if err := realNode.Down(); err != nil {
		return true, fmt.Errorf("removing the real node of cluster %q: %w", c.Name, err)
	}
	_ = os.Remove(filepath.Dir(realNode.Dir))
	procs, err := c.Processes()
	if err != nil {
		return false, err
	}
	_, dirErr := os.Stat(c.Dir())
	if errors.Is(dirErr, os.ErrNotExist) && len(procs) == 0 {
		if err := c.releaseNetwork(); err != nil {
			return false, err
		}
		if hadRealNode {
			_ = os.Remove(c.Workdir)
			return true, nil
		}
		_ = os.Remove(c.configPath())
		return false, nil
	}
	// kwokctl stops the components it started; whatever it misses (a
	// half-created cluster, a crashed kwokctl) is killed below.
	kwokErr := c.kwokctl(ctx, "delete", "cluster", "--name", c.Name)
	if err := c.killRemaining(ctx); err != nil {
		return true, err
	}
	if err := os.RemoveAll(c.Dir()); err != nil {
		return true, fmt.Errorf("removing %s: %w", c.Dir(), err)
	}
	if err := os.Remove(c.configPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("removing %s: %w", c.configPath(), err)
	}
	if err := c.releaseNetwork(); err != nil {
		return true, err
	}
	// Leave no empty folders behind either.
	_ = os.Remove(filepath.Join(c.Workdir, "clusters"))
	_ = os.Remove(c.Workdir)
	if kwokErr != nil {
		_, _ = fmt.Fprintf(c.log(), "kwokctl delete reported %v; its processes and files were removed anyway\n", kwokErr)
	}
	return true, nil
}

// ServiceCIDR is the dev cluster's Service range. The `kubernetes`
// Service gets its first address, which the API server's certificate
// names so pods on the real node reach it there (realnode.Network).
var ServiceCIDR = netplan.Services.String()

// kwokctlConfig makes kwokctl run the pinned binaries, never download, and
// bind every component to loopback. The API server calls kubelets (a real
// node's: logs, exec) with the cluster's admin certificate, checks their
// serving certificates against the cluster CA, and reaches them at their
// InternalIP; its certificate also names the `kubernetes` Service's
// address. There is no kube-proxy: the API server calls webhooks and
// aggregated APIs at their endpoints (pods on the real node), not at
// their Services' cluster IPs. kwok manages only the simulated nodes
// (annotated), never a real node's status or pods.
const kwokctlConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeAuthorization: true
  kubeAdmission: true
  disableQPSLimits: true
  kubeVersion: %[1]s
  etcdBinary: %[2]s
  kubeApiserverBinary: %[3]s
  kubeControllerManagerBinary: %[4]s
  kubeSchedulerBinary: %[5]s
  kwokControllerBinary: %[6]s
  kubectlBinary: %[7]s
  kubeApiserverCertSANs: [%[8]q]
componentsPatches:
- name: kube-apiserver
  extraArgs:
  - {key: service-cluster-ip-range, value: %[9]q}
  - {key: kubelet-client-certificate, value: %[10]q}
  - {key: kubelet-client-key, value: %[11]q}
  - {key: kubelet-certificate-authority, value: %[12]q}
  - {key: kubelet-preferred-address-types, value: InternalIP}
  - {key: enable-aggregator-routing, value: "true"}
  - {key: egress-selector-config-file, value: %[14]q}
- name: kube-controller-manager
  extraArgs:
  - {key: service-cluster-ip-range, value: %[9]q}
- name: kwok-controller
  extraArgs:
  - {key: manage-all-nodes, value: "false", override: true}
  - {key: manage-nodes-with-annotation-selector, value: %[13]q}
components:
- name: egress-proxy
  binary: %[15]q
  workDir: %[17]q
  args: [dev, egress-proxy, --socket, %[16]q]
`

// PKI files kwokctl makes for a cluster: one CA, and one admin
// certificate (system:masters) every component uses.
func (c *Cluster) pkiPath(name string) string { return filepath.Join(c.Dir(), "pki", name) }

// CAFiles are the cluster CA's certificate and key.
func (c *Cluster) CAFiles() (cert, key string) { return c.pkiPath("ca.crt"), c.pkiPath("ca.key") }

func (c *Cluster) writeConfig() error {
	if err := os.MkdirAll(c.Workdir, 0o755); err != nil { //nolint:gosec // the dev cluster's folder; its secrets are files of their own, 0600
		return fmt.Errorf("creating dev cluster folder: %w", err)
	}
	cfg := fmt.Sprintf(kwokctlConfig, kubeVersion(),
		c.Tools.Path("etcd"), c.Tools.Path("kube-apiserver"), c.Tools.Path("kube-controller-manager"),
		c.Tools.Path("kube-scheduler"), c.Tools.Path("kwok"), c.Tools.Path("kubectl"),
		kubernetesServiceIP().String(), ServiceCIDR,
		c.pkiPath("admin.crt"), c.pkiPath("admin.key"), c.pkiPath("ca.crt"),
		annotationKwokNode+"=fake",
		c.egressConfigPath(), c.selfPath(), c.egressSocket(), c.Dir())
	if err := c.writeEgressConfig(); err != nil {
		return err
	}
	if err := os.WriteFile(c.configPath(), []byte(cfg), 0o644); err != nil { //nolint:gosec // kwokctl's configuration holds no secret
		return fmt.Errorf("writing kwokctl configuration: %w", err)
	}
	return nil
}

// kubernetesServiceIP is the first address of ServiceCIDR.
func kubernetesServiceIP() netip.Addr { return netplan.KubernetesService() }

// kwokctl runs one kwokctl command on the cluster's work folder. Its output
// goes to Log; on failure the tail of it is part of the error.
func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Tools.Path("kwokctl"), args...)
	// kwokctl runs the first kubectl on PATH (or downloads one): make that
	// the pinned one.
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.Workdir,
		"PATH="+filepath.Dir(c.Tools.Path("kubectl"))+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout = io.MultiWriter(&out, c.log())
	cmd.Stderr = cmd.Stdout
	// The components kwokctl starts outlive it and write to their own log
	// files; should one still hold kwokctl's output pipe, Wait gives up on
	// the pipe after this delay instead of blocking forever.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %s: %w: %s", strings.Join(args[:2], " "), err, tail(out.String(), 2000))
	}
	return nil
}

func (c *Cluster) progress(start time.Time, format string, args ...any) {
	_, _ = fmt.Fprintf(c.log(), "dev cluster %q: %s after %s\n", c.Name, fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
}

func (c *Cluster) log() io.Writer {
	if c.Log == nil {
		return io.Discard
	}
	return c.Log
}

// logTails quotes the end of the named components' logs, for errors that
// would otherwise only say "timed out".
func (c *Cluster) logTails(components ...string) string {
	var b strings.Builder
	for _, name := range components {
		path := filepath.Join(c.Dir(), "logs", name+".log")
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- end of %s:\n%s\n", path, tail(string(data), 1500))
	}
	return b.String()
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// kubeVersion is the Kubernetes release kwokctl should assume: the one the
// toolchain builds.
func kubeVersion() string {
	return strings.TrimPrefix(toolchain.KubeVersion, "v")
}
