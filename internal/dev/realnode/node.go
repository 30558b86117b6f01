package realnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/dev/image"
)

// Node is the dev cluster's real worker node: the bridge, containerd with
// Cloister's images, the fake TEE devices and the kubelet, all under Dir
// except what the kubelet, containerd and the CNI plugins put in fixed
// places (FixedPaths), which Down removes too when Up made them.
type Node struct {
	Name string
	// Dir holds everything of the node. Unix socket paths inside it must
	// stay under 108 bytes: keep it short.
	Dir string
	// KubeletBin is the kubelet; RuntimeBinDir has containerd, its shim,
	// ctr and the CNI plugins.
	KubeletBin, RuntimeBinDir string
	Network                   Network
	// APIServer is the control plane's URL (on 127.0.0.1); CACert and
	// CAKey are the cluster CA's files.
	APIServer       string
	CACert, CAKey   string
	APIServerTarget string // host:port the API server proxy forwards to
	// Images are OCI-layout tarballs (make images) imported into
	// containerd: Cloister's images, the pause image among them.
	Images []string
	Labels map[string]string
	// Log receives progress; nil discards it.
	Log io.Writer
}

// DevicesDir is the host folder of the fake TEE device nodes: the device
// plugin's and LAS's --dev-root on this node.
func (n *Node) DevicesDir() string { return filepath.Join(n.Dir, "dev") }

// AESMDir is the host folder LAS mounts for Intel's AESM socket on this
// node: empty, until a test serves a fake AESM in it.
func (n *Node) AESMDir() string { return filepath.Join(n.Dir, "aesmd") }

// SysDir is the node's sysfs for the device plugins: a fake SGX EPC
// (MakeFakeSys) and the host's CPUs.
func (n *Node) SysDir() string { return filepath.Join(n.Dir, "sys") }

// CDIDir is the node's CDI spec folder (containerd reads it): the DRA
// drivers' --cdi-dir on this node.
func (n *Node) CDIDir() string { return n.runtime("").CDIDir() }

// KubeletRootDir is the kubelet's --root-dir (pod-resources is in it).
func (n *Node) KubeletRootDir() string { return n.kubelet(nil).RootDir() }

// hostRecord lists the kubelet's fixed paths and cgroups Up found missing.
func (n *Node) hostRecord() string { return filepath.Join(n.Dir, "host.json") }

func (n *Node) runtime(sandbox string) *Runtime {
	return &Runtime{Dir: filepath.Join(n.Dir, "containerd"), BinDir: n.RuntimeBinDir, SandboxImage: sandbox}
}

func (n *Node) kubelet(ca *CA) *Kubelet {
	return &Kubelet{
		Bin: cmp.Or(n.KubeletBin, "kubelet"), Dir: filepath.Join(n.Dir, "kubelet"), NodeName: n.Name,
		NodeIP: n.Network.NodeIP(), PodCIDR: n.Network.PodCIDR(), Labels: n.Labels,
		APIServer: n.APIServer, CA: ca, RuntimeSocket: n.runtime("").Socket(), DNS: n.Network.DNSAddr().Addr(),
	}
}

// Import loads an image tarball into the running node's containerd, as Up
// does with the node's images (tests add an image later this way).
func (n *Node) Import(ctx context.Context, tarball string) error {
	return n.runtime("").Import(ctx, tarball)
}

// Exists reports whether Up has made this node (and Down not removed it).
func (n *Node) Exists() bool {
	_, err := os.Stat(n.hostRecord())
	return err == nil
}

// Up starts whatever of the node is not running: the bridge, containerd
// (importing the images), the fake devices, the API server proxy's static
// pod and the kubelet. It returns once the kubelet runs; the node's
// readiness is for the caller to watch.
func (n *Node) Up(ctx context.Context) error {
	start := time.Now()
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if err := HostTools(); err != nil {
		return err
	}
	if err := n.Network.Validate(); err != nil {
		return err
	}
	if pids := otherKubelets(n.kubelet(nil).configPath()); len(pids) > 0 {
		return fmt.Errorf("another kubelet runs on this host (pid %v): one real node per host, as two kubelets delete each other's pod cgroups; stop it or its dev cluster first", pids)
	}
	sandbox, proxy, err := findImages(n.Images)
	if err != nil {
		return err
	}
	ca, err := LoadCA(n.CACert, n.CAKey)
	if err != nil {
		return err
	}
	if err := recordMissing(n.hostRecord(), append(slices.Clone(KubeletPaths), CgroupTrees("kubepods")...)); err != nil {
		return err
	}
	if err := n.Network.Up(); err != nil {
		return err
	}
	n.progress(start, "bridge %s up (%s)", n.Network.Bridge, n.Network.Node)
	rt := n.runtime(sandbox)
	if err := os.MkdirAll(rt.CNIConfDir(), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rt.CNIConfDir(), "10-cloister.conflist"), n.Network.CNIConfig(filepath.Join(n.Dir, "cni", "ipam")), 0o600); err != nil {
		return err
	}
	if err := rt.Start(ctx); err != nil {
		return err
	}
	// Before the kubelet makes pods: their hostPorts must not lose to an
	// earlier node's rules.
	ids, err := rt.Ctr(ctx, "containers", "list", "--quiet")
	if err != nil {
		return err
	}
	if err := removeStaleHostPorts(n.Network.PodCIDR(), strings.Fields(string(ids))); err != nil {
		return err
	}
	// ctr imports one tarball a run; several runs at once halve the wait.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, file := range n.Images {
		g.Go(func() error {
			if err := rt.Import(gctx, file); err != nil {
				return fmt.Errorf("importing %s: %w", file, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	n.progress(start, "containerd up, %d images imported", len(n.Images))
	if err := MakeFakeDevices(n.DevicesDir()); err != nil {
		return err
	}
	if err := MakeFakeSys(n.SysDir(), "/sys"); err != nil {
		return err
	}
	k := n.kubelet(ca)
	if err := os.MkdirAll(k.StaticPodDir(), 0o700); err != nil {
		return err
	}
	manifest, err := ProxyPod(proxy, netip.AddrPortFrom(n.Network.Service, 443).String(), n.APIServerTarget)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(k.StaticPodDir(), ProxyPodName+".yaml"), manifest, 0o600); err != nil {
		return err
	}
	if err := n.writeStoragePod(ca, proxy, k.StaticPodDir()); err != nil {
		return err
	}
	if err := n.writeDNSPod(ca, proxy, k.StaticPodDir()); err != nil {
		return err
	}
	if err := k.Start(ctx); err != nil {
		return err
	}
	n.progress(start, "kubelet running")
	return nil
}

// findImages checks the tarballs and finds the pause and CLI images among
// them by name.
func findImages(files []string) (pause, cli string, err error) {
	for _, f := range files {
		ref, _, err := image.ReadRef(f)
		if err != nil {
			return "", "", fmt.Errorf("image %s: %w (run `make images`)", f, err)
		}
		switch imageName(ref) {
		case "cloister-pause":
			pause = ref
		case "cloister":
			cli = ref
		}
	}
	if pause == "" || cli == "" {
		return "", "", fmt.Errorf("the real node needs the cloister-pause and cloister images among %v; run `make images`", files)
	}
	return pause, cli, nil
}

// imageName is the last path element of a reference without its tag.
func imageName(ref string) string {
	repo := image.Repository(ref)
	return repo[strings.LastIndexByte(repo, '/')+1:]
}

// Down stops every process of the node and removes the bridge, its mounts,
// the cgroups and fixed paths Up made, and Dir. It works from the files
// alone, after a crash or in another process; a node that does not exist
// is not an error.
func (n *Node) Down() error {
	if _, err := os.Stat(n.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("removing the real node in %s: %w", n.Dir, ErrNotRoot)
	}
	var errs []error
	if err := n.kubelet(nil).Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping the kubelet: %w", err))
	}
	if err := n.runtime("").Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping containerd: %w", err))
	}
	// Its pods were killed without a CNI DEL: their hostPort rules go
	// here, also from a table that was there before the node.
	if err := removeStaleHostPorts(n.Network.PodCIDR(), nil); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := n.Network.Down(); err != nil {
		errs = append(errs, err)
	}
	if err := removeRecorded(n.hostRecord()); err != nil {
		errs = append(errs, err)
	}
	// Container log links the kubelet made in a folder it did not create.
	err := removeEntriesIn("/var/log/containers", func(_, target string) bool { return strings.HasPrefix(target, n.Dir+"/") })
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Dir keeps the state for the next try.
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		return fmt.Errorf("removing %s: %w", n.Dir, err)
	}
	return nil
}

func (n *Node) progress(start time.Time, format string, args ...any) {
	if n.Log != nil {
		_, _ = fmt.Fprintf(n.Log, "real node %q: %s after %s\n", n.Name, fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
	}
}

// otherKubelets lists kubelets on this host other than the one with the
// given config file.
func otherKubelets(config string) []int {
	return proc.Find(func(argv [][]byte) bool {
		if len(argv) == 0 || filepath.Base(string(argv[0])) != "kubelet" {
			return false
		}
		for _, a := range argv[1:] {
			if string(a) == "--config="+config {
				return false
			}
		}
		return true
	})
}

// ContainerdConfig is the node's containerd configuration, where a
// ConfidentialRuntime's installer adds its handler.
func (n *Node) ContainerdConfig() string { return n.runtime("").configPath() }

// ContainerdSocket is the node's containerd socket.
func (n *Node) ContainerdSocket() string { return n.runtime("").Socket() }
