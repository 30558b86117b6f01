// Package realnode owns the dev cluster's real worker node: a container
// runtime (containerd built from its module, Debian's runc, the CNI
// plugins) and, on top of it, a kubelet. Everything it creates lives under
// one work directory, so it can all be found and removed again.
package realnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/dev/image"
)

// Namespace is the containerd namespace the kubelet's CRI uses.
const Namespace = "k8s.io"

// Runtime is containerd with its runc shim and the CNI plugins.
type Runtime struct {
	// Dir holds the config, root, state, socket and log.
	Dir string
	// BinDir has containerd, containerd-shim-runc-v2, ctr and the CNI
	// plugins (toolchain's node tools).
	BinDir string
	// SandboxImage is the pod sandbox (pause) image, imported locally.
	SandboxImage string
}

// Socket is containerd's gRPC address.
func (r *Runtime) Socket() string { return filepath.Join(r.Dir, "containerd.sock") }

// RuncRoot is runc's state folder, inside Dir rather than runc's default
// /run/containerd/runc, so nothing of this node outlives its removal there.
func (r *Runtime) RuncRoot() string { return filepath.Join(r.Dir, "runc") }

// CNIConfDir is where the node's network configuration goes.
func (r *Runtime) CNIConfDir() string { return filepath.Join(r.Dir, "cni", "conf") }

// CDIDir is containerd's one CDI spec folder, inside Dir rather than the
// host's /etc/cdi and /var/run/cdi, so the node's DRA drivers write their
// claims' specs where only this node's containerd reads them.
func (r *Runtime) CDIDir() string { return filepath.Join(r.Dir, "cdi") }

// Config is containerd's configuration (version 3). restrict_oom_score_adj:
// without CAP_SYS_RESOURCE (as in many containers and this project's CI)
// runc cannot lower a sandbox's OOM score and every pod fails with "can't
// get final child's PID from pipe: EOF". netns_mounts_under_state_dir keeps
// the pods' network namespaces out of /var/run/netns.
func (r *Runtime) Config() []byte {
	return fmt.Appendf(nil, `version = 3
root = %q
state = %q

[grpc]
  address = %q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [%q]
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q
`, filepath.Join(r.Dir, "root"), filepath.Join(r.Dir, "state"), r.Socket(), r.CDIDir(), r.BinDir, r.CNIConfDir(), r.RuncRoot(), r.SandboxImage)
}

// ErrNotRoot says why a real node cannot run.
var ErrNotRoot = errors.New("a real node needs root (containerd, runc, mounts, a network bridge); run as root, or use the simulated nodes only")

// ErrNoRunc says what to install.
var ErrNoRunc = errors.New("runc is not installed: the real node uses the distribution's (apt-get install runc)")

// Runc finds Debian's runc; a runc built from its module lacks seccomp
// support here.
func Runc() (string, error) {
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", ErrNoRunc
	}
	return p, nil
}

// hostRecord lists containerd's fixed paths and cgroups Start found missing.
func (r *Runtime) hostRecord() string { return filepath.Join(r.Dir, "host.json") }

// hostPortRecord lists the portmap plugin's nftables tables Start found
// missing.
func (r *Runtime) hostPortRecord() string { return filepath.Join(r.Dir, "hostport-tables") }

func (r *Runtime) configPath() string { return filepath.Join(r.Dir, "containerd.toml") }

func (r *Runtime) logPath() string { return filepath.Join(r.Dir, "logs", "containerd.log") }

// daemon is containerd, known by this runtime's config file.
func (r *Runtime) daemon() daemon {
	return daemon{
		Bin:  filepath.Join(r.BinDir, "containerd"),
		Args: []string{"--config", r.configPath()},
		// The shim is found on PATH.
		Env:     append(os.Environ(), "PATH="+r.BinDir+string(os.PathListSeparator)+os.Getenv("PATH")),
		Log:     r.logPath(),
		Marker:  r.configPath(),
		Restart: true,
	}
}

// Start writes the config and runs containerd until it answers; one
// already running is left as it is.
func (r *Runtime) Start(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := Runc(); err != nil {
		return err
	}
	d := r.daemon()
	if err := recordMissing(r.hostRecord(), append(slices.Clone(RuntimePaths), CgroupTrees(Namespace)...)); err != nil {
		return err
	}
	if err := recordHostPortTables(r.hostPortRecord()); err != nil {
		return err
	}
	if !d.alive() {
		for _, dir := range []string{"root", "state", "logs", "cdi", filepath.Join("cni", "conf")} {
			if err := os.MkdirAll(filepath.Join(r.Dir, dir), 0o700); err != nil {
				return err
			}
		}
		if err := os.WriteFile(r.configPath(), r.Config(), 0o600); err != nil {
			return err
		}
		if err := d.Start(); err != nil {
			return err
		}
	}
	for {
		if _, err := r.Ctr(ctx, "version"); err == nil {
			return nil
		}
		if !d.alive() {
			return fmt.Errorf("containerd exited; see %s", r.logPath())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not answer: %w; see %s", ctx.Err(), r.logPath())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Ctr runs ctr against this containerd in the kubelet's namespace.
func (r *Runtime) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(r.BinDir, "ctr"), append([]string{"--address", r.Socket(), "--namespace", Namespace}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}

// Import loads an OCI-layout tarball (make images) and names the image
// by its digest too (repository@sha256:...): the kubelet looks a pinned
// reference up by that name, and would otherwise go to the registry.
func (r *Runtime) Import(ctx context.Context, tarball string) error {
	ref, digest, err := image.ReadRef(tarball)
	if err != nil {
		return err
	}
	if _, err := r.Ctr(ctx, "images", "import", tarball); err != nil {
		return err
	}
	_, err = r.Ctr(ctx, "images", "tag", "--force", ref, image.Repository(ref)+"@"+digest)
	return err
}

// Stop ends containerd and its shims (and so their containers), removes
// the shims' sockets and unmounts everything under Dir. It needs nothing
// from Start: `dev down` runs it in another process, maybe after a crash.
func (r *Runtime) Stop() error {
	var errs []error
	if err := r.daemon().Stop(10 * time.Second); err != nil {
		errs = append(errs, fmt.Errorf("stopping containerd: %w", err))
	}
	// Shims outlive containerd by design; they are ours when they serve
	// this runtime's socket, and the containers are their descendants
	// (a shim is its containers' subreaper).
	shims := proc.WithArg(r.Socket())
	sockets := listeningSockets(shims, ShimSocketDir)
	victims := append(descendants(shims), shims...)
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Killing is asynchronous: until they are gone a shim still holds its
	// socket, which would then look alive.
	if err := proc.WaitGone(victims, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(r.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeSockets(sockets, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := removeRecorded(r.hostRecord()); err != nil {
		errs = append(errs, err)
	}
	// The hostPort rules of pods killed above, which no CNI DEL removed.
	if err := removeHostPortTables(r.hostPortRecord()); err != nil {
		errs = append(errs, err)
	}
	// The CNI plugins' results for this node's network, should their
	// folder have existed before.
	err := removeEntriesIn("/var/lib/cni/results", func(name, _ string) bool { return strings.HasPrefix(name, cniNetwork+"-") })
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
