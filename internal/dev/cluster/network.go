package cluster

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/dev/cluster/devinfo"
	"github.com/cloister-cc/cloister/internal/dev/cluster/hostnet"
)

// What keeps the cluster's traffic on this machine: the host's routing
// rules (hostnet, as root) and the API server's egress proxy (egress,
// always), which runs from a copy of the cloister binary in the cluster's
// bin folder, so that the cluster outlives the binary that made it (a `go
// run`'s, a test's).

// cloisterMain is the main package of the binary the egress proxy runs.
const cloisterMain = "github.com/cloister-cc/cloister/cmd/cloister"

// egressSocket is where the egress proxy listens: in the cluster's folder,
// which only its owner reads.
func (c *Cluster) egressSocket() string { return filepath.Join(c.Dir(), "egress.sock") }

// egressConfigPath is the API server's EgressSelectorConfiguration.
func (c *Cluster) egressConfigPath() string {
	return filepath.Join(c.Workdir, c.Name+".egress.yaml")
}

// selfPath is the cluster's copy of the cloister binary, named for what it
// runs there: kwokctl names its log (logs/egress-proxy.log) after it.
func (c *Cluster) selfPath() string { return filepath.Join(c.Dir(), "bin", "egress-proxy") }

// egressConfig sends the API server's traffic for nodes, pods, Services
// and webhooks ("cluster"), and for webhooks by URL ("controlplane"),
// through the proxy; etcd stays direct.
const egressConfig = `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport: {uds: {udsName: %[1]q}}
- name: controlplane
  connection:
    proxyProtocol: HTTPConnect
    transport: {uds: {udsName: %[1]q}}
`

// maxSocketPath: a unix socket's path has 108 bytes, its NUL included.
const maxSocketPath = 107

func (c *Cluster) writeEgressConfig() error {
	if n := len(c.egressSocket()); n > maxSocketPath {
		return fmt.Errorf("the cluster's folder %s is too deep for its egress proxy's socket (%d bytes, at most %d): use a shorter cache folder (CLOISTER_CACHE_DIR) or --name", c.Dir(), n, maxSocketPath)
	}
	if err := os.WriteFile(c.egressConfigPath(), fmt.Appendf(nil, egressConfig, c.egressSocket()), 0o644); err != nil { //nolint:gosec // the egress selector configuration holds no secret
		return fmt.Errorf("writing the API server's egress configuration: %w", err)
	}
	return nil
}

// installSelf copies Self into the cluster's bin folder unless the copy is
// already the same file (size and modification time).
func (c *Cluster) installSelf() error {
	if c.Self == "" {
		return errors.New("the dev cluster needs the cloister binary for its egress proxy (Cluster.Self)")
	}
	info, err := buildinfo.ReadFile(c.Self)
	if err != nil || info.Path != cloisterMain {
		path := "unreadable"
		if info != nil {
			path = info.Path
		}
		return fmt.Errorf("the dev cluster's egress proxy runs from the cloister binary; %s is not one (%s): run `make build` and use bin/cloister", c.Self, path)
	}
	src, err := os.Stat(c.Self)
	if err != nil {
		return err
	}
	dst := c.selfPath()
	if have, err := os.Stat(dst); err == nil && have.Size() == src.Size() && have.ModTime().Equal(src.ModTime()) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { //nolint:gosec // the cluster's bin folder: programs others run
		return err
	}
	in, err := os.Open(c.Self)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".cloister-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("copying %s into the cluster: %w", c.Self, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chtimes(tmp.Name(), src.ModTime(), src.ModTime()); err != nil {
		return err
	}
	// A rename: a running proxy keeps the file it was started from.
	return os.Rename(tmp.Name(), dst)
}

// checkEgress refuses a cluster made before the egress proxy: its API
// server dials simulated addresses, which may leave the machine.
func (c *Cluster) checkEgress() error {
	cfg, err := os.ReadFile(c.configPath())
	if err != nil {
		return fmt.Errorf("reading the cluster's configuration: %w", err)
	}
	if !strings.Contains(string(cfg), "egress-selector-config-file") {
		return fmt.Errorf("cluster %q was made by an older cloister: its API server may send traffic for simulated nodes beyond this machine; run `cloister dev down --name %s` and up again", c.Name, c.Name)
	}
	return nil
}

// acquireHostNetwork makes the plan's ranges unreachable from the host
// (as root), for this cluster among others. Without root it only checks
// that the plan does not overlap the host's routes, and says so.
func (c *Cluster) acquireHostNetwork(h *hostnet.Host) error {
	dir, err := filepath.Abs(c.Dir())
	if err != nil {
		return err
	}
	// The record names clusters by their folders, which must exist.
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a runtime folder others must reach (the egress socket)
		return err
	}
	err = h.Acquire(dir)
	if errors.Is(err, hostnet.ErrNotRoot) {
		_, _ = fmt.Fprintf(c.log(), "dev cluster %q: not root, so no routing rules: its API server's egress proxy keeps its traffic on this machine\n", c.Name)
		return nil
	}
	return err
}

// releaseNetwork removes the egress configuration and takes the cluster
// off the host rules' record; the last cluster's release removes them.
func (c *Cluster) releaseNetwork() error {
	if err := os.Remove(c.egressConfigPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", c.egressConfigPath(), err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	dir, err := filepath.Abs(c.Dir())
	if err != nil {
		return err
	}
	if err := c.host().Release(dir); err != nil {
		return fmt.Errorf("cluster %q: the host's routing rules: %w", c.Name, err)
	}
	return nil
}

// writeDevInfo tells installers what this cluster is (devinfo): whether
// it has a real node, and the node's folders.
func writeDevInfo(ctx context.Context, cs kubernetes.Interface, info devinfo.Info) error {
	want := info.ConfigMap()
	cms := cs.CoreV1().ConfigMaps(devinfo.Namespace)
	have, err := cms.Get(ctx, devinfo.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, want, metav1.CreateOptions{})
	case err == nil && !maps.Equal(have.Data, want.Data):
		have.Data = want.Data
		_, err = cms.Update(ctx, have, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", devinfo.Namespace, devinfo.Name, err)
	}
	return nil
}
