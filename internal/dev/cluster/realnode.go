package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/cluster/devinfo"
	"github.com/cloister-cc/cloister/internal/dev/realnode"
)

// RealNodeName is the real worker node's name.
const RealNodeName = "real"

// LabelRealNode marks the real node (not managed-by cloister-dev: the
// simulated nodes' convergence leaves it alone).
const LabelRealNode = tee.LabelRealNode

// RealNodeTools are what a real node runs: the kubelet, containerd's
// folder (containerd, shim, ctr, CNI plugins) and Cloister's image
// tarballs (make images).
type RealNodeTools struct {
	Kubelet    string
	RuntimeDir string
	Images     []string
}

// RealNode is the cluster's real node, described from the cluster's
// files; Up on it needs the tools, Down and Exists do not.
func (c *Cluster) RealNode(tools RealNodeTools) (*realnode.Node, error) {
	caCert, caKey := c.CAFiles()
	n := &realnode.Node{
		Name: RealNodeName,
		// Short: containerd's and the shims' socket paths are below it.
		Dir:           filepath.Join(c.Workdir, "nodes", c.Name),
		KubeletBin:    tools.Kubelet,
		RuntimeBinDir: tools.RuntimeDir,
		Network:       realnode.DefaultNetwork,
		CACert:        caCert, CAKey: caKey,
		Images: tools.Images,
		Labels: map[string]string{LabelRealNode: "true"},
		Log:    c.Log,
	}
	if c.Exists() {
		cfg, err := c.RESTConfig()
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(cfg.Host)
		if err != nil {
			return nil, fmt.Errorf("the kubeconfig's server %q: %w", cfg.Host, err)
		}
		n.APIServer, n.APIServerTarget = cfg.Host, u.Host
	}
	return n, nil
}

// UpRealNode starts the real node (see realnode.Node.Up) on a running
// cluster and waits until it is Ready.
func (c *Cluster) UpRealNode(ctx context.Context, tools RealNodeTools) (*corev1.Node, error) {
	start := time.Now()
	n, err := c.RealNode(tools)
	if err != nil {
		return nil, err
	}
	if n.APIServer == "" {
		return nil, fmt.Errorf("cluster %q does not exist; bring it up first", c.Name)
	}
	if err := c.checkRealNodeSupport(); err != nil {
		return nil, err
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// Before the node: its provisioner and DNS start with the rights they need.
	if err := ensureNodeParts(ctx, cs); err != nil {
		return nil, fmt.Errorf("the real node's storage class: %w", err)
	}
	if err := n.Up(ctx); err != nil {
		return nil, fmt.Errorf("real node of cluster %q: %w", c.Name, err)
	}
	var node *corev1.Node
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		node = got
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = cond.Reason + ": " + cond.Message
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for node %q to be Ready (%s): %w; see the logs in %s", RealNodeName, last, err, filepath.Join(n.Dir, "kubelet", "logs"))
	}
	if err := writeDevInfo(ctx, cs, devinfo.Info{RealNode: RealNodeName, DevDir: n.DevicesDir(), KubeletDir: n.KubeletRootDir(), AESMDir: n.AESMDir(), SysDir: n.SysDir(), CDIDir: n.CDIDir()}); err != nil {
		return nil, err
	}
	c.progress(start, "real node %q Ready", RealNodeName)
	return node, nil
}

// checkRealNodeSupport refuses a cluster made before the real node
// existed: its API server lacks the kubelet flags and the certificate name
// that only a new cluster gets.
func (c *Cluster) checkRealNodeSupport() error {
	data, err := os.ReadFile(c.pkiPath("admin.crt"))
	if err != nil {
		return fmt.Errorf("reading the API server certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return fmt.Errorf("%s holds no PEM certificate", c.pkiPath("admin.crt"))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", c.pkiPath("admin.crt"), err)
	}
	ip := net.IP(kubernetesServiceIP().AsSlice())
	if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
		return fmt.Errorf("cluster %q was made by an older cloister: its API server certificate does not name %s, where pods on a real node reach it; run `cloister dev down --name %s` and up again", c.Name, ip, c.Name)
	}
	cfg, err := os.ReadFile(c.configPath())
	if err != nil {
		return fmt.Errorf("reading the cluster's configuration: %w", err)
	}
	if !strings.Contains(string(cfg), "enable-aggregator-routing") {
		return fmt.Errorf("cluster %q was made by an older cloister: its API server calls webhooks at Service addresses, which nothing routes without kube-proxy; run `cloister dev down --name %s` and up again", c.Name, c.Name)
	}
	return nil
}
