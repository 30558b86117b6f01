package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

// The config is TOML containerd reads: the keys that make pods work here.
func TestConfig(t *testing.T) {
	r := &Runtime{Dir: "/work/node \"x\"", BinDir: "/bin dir", SandboxImage: "localhost/cloister/pause:v1"}
	var cfg struct {
		Version int
		Root    string
		GRPC    struct{ Address string }
		Plugins map[string]map[string]any
	}
	if _, err := toml.Decode(string(r.Config()), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, r.Config())
	}
	runtime := cfg.Plugins["io.containerd.cri.v1.runtime"]
	images := cfg.Plugins["io.containerd.cri.v1.images"]
	cni, _ := runtime["cni"].(map[string]any)
	pinned, _ := images["pinned_images"].(map[string]any)
	if cfg.Version != 3 || cfg.Root != `/work/node "x"/root` || cfg.GRPC.Address != r.Socket() ||
		runtime["restrict_oom_score_adj"] != true || runtime["netns_mounts_under_state_dir"] != true || cni["conf_dir"] != r.CNIConfDir() ||
		pinned["sandbox"] != "localhost/cloister/pause:v1" || images["snapshotter"] != "overlayfs" ||
		fmt.Sprint(runtime["cdi_spec_dirs"]) != "["+r.CDIDir()+"]" ||
		!strings.Contains(string(r.Config()), `Root = "/work/node \"x\"/runc"`) {
		t.Errorf("config %+v", cfg)
	}
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/tmp/a\040b\134c`); got != `/tmp/a b\c` {
		t.Errorf("unescape = %q", got)
	}
}

// As root, with runc installed: containerd from the node tools imports a
// pause image built by internal/dev/image, runs it as the image's non-root
// user, and leaves no process or mount behind when stopped.
func TestRuntimeRunsAContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skipf(t, "a real node needs root")
	}
	if _, err := Runc(); err != nil {
		testskip.Skipf(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tc, err := toolchain.Locate()
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := toolchain.Lock(filepath.Join(tc.CacheRoot, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := HostBusy(); err != nil {
		testskip.Skipf(t, "%v", SkipBusy(err))
	}
	_, tools := tc.Node()
	if err := tools.Ensure(ctx, os.Stderr); err != nil {
		t.Fatal(err)
	}
	// The sandbox image as a release ships it: an index of every
	// platform's image, of which the node must take only its own.
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	platforms := slices.Clone(image.All)
	if !slices.Contains(platforms, image.Host()) {
		platforms = append([]image.Platform{image.Host()}, platforms...)
	}
	for _, p := range platforms {
		build := exec.CommandContext(ctx, "go", append(append([]string{"build"}, toolchain.BuildFlags...), "-o", filepath.Join(p.Dir(bin), "pause"), "github.com/cloister-cc/cloister/cmd/cloister-pause")...)
		build.Env = append(append(os.Environ(), toolchain.BuildEnv...), "GOOS="+p.OS, "GOARCH="+p.Architecture)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building pause for %s: %v\n%s", p, err, out)
		}
	}
	index, images, err := image.BuildIndex(image.Spec{Name: "pause", Binary: filepath.Join(bin, "pause"), Version: "test"}, platforms)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "localhost/cloister/pause:test"
	tarball := filepath.Join(dir, "pause.tar")
	if err := image.WriteIndex(index, ref, tarball); err != nil {
		t.Fatal(err)
	}
	sockets := func() []string {
		entries, _ := os.ReadDir(ShimSocketDir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := sockets()
	hostPaths := append(slices.Clone(RuntimePaths), CgroupTrees(Namespace)...)
	missing := missingPaths(hostPaths)
	r := &Runtime{Dir: filepath.Join(dir, "node"), BinDir: tools.BinDir, SandboxImage: ref}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}()
	if err := r.Import(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	if out, err := r.Ctr(ctx, "images", "ls"); err != nil || !strings.Contains(string(out), "io.cri-containerd.pinned=pinned") {
		t.Errorf("the sandbox image is not pinned: %v\n%s", err, out)
	}
	// Named by digest too, as manifests that pin it name it.
	digest, _ := index.Digest()
	if out, err := r.Ctr(ctx, "images", "ls", "-q"); err != nil || !strings.Contains(string(out), "localhost/cloister/pause@"+digest.String()) {
		t.Errorf("no image named by its digest %s: %v\n%s", digest, err, out)
	}
	// ctr writes every blob of the tarball, and containerd's garbage
	// collector then removes what the imported image does not reference:
	// the other platforms' configs and layers, when their manifests were
	// not imported as part of it.
	layerOf := make([]string, len(platforms))
	for i := range platforms {
		layers, err := images[i].Layers()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := layers[0].Digest()
		layerOf[i] = d.String()
	}
	// The collector runs when a deletion asks for it, and at most a small
	// share of the time, so on a loaded machine it may wait long: a lease
	// deleted with --sync runs it now, as containerd's own API allows.
	lease, err := r.Ctr(ctx, "leases", "create")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Ctr(ctx, "leases", "delete", "--sync", strings.Fields(string(lease))[0]); err != nil {
		t.Fatal(err)
	}
	var held []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		content, err := r.Ctr(ctx, "content", "ls", "-q")
		if err != nil {
			t.Fatal(err)
		}
		held = held[:0]
		for i, p := range platforms {
			if strings.Contains(string(content), layerOf[i]) {
				held = append(held, p.String())
			}
		}
		if slices.Equal(held, []string{image.Host().String()}) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(held, []string{image.Host().String()}) {
		t.Errorf("the node holds the layers of %v, want only the host's (%s)", held, image.Host())
	}
	if _, err := r.Ctr(ctx, "run", "--detach", "--runc-root", r.RuncRoot(), ref, "p1"); err != nil {
		t.Fatal(err)
	}
	var uid string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, pid := range proc.WithArg("/usr/local/bin/pause") {
			status, _ := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
			for _, line := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(line, "Uid:") {
					uid = strings.Fields(line)[1]
				}
			}
		}
		if uid != "" {
			break
		}
	}
	if uid != "65532" {
		t.Errorf("the container runs as uid %q, want the image's 65532", uid)
	}

	// Stopped as a node installer stops it, containerd comes back (its
	// supervisor, like systemd's Restart=always) and the container kept
	// running through it.
	old := r.daemon().Running()
	if len(old) != 1 {
		t.Fatalf("containerd processes %v", old)
	}
	if err := proc.Terminate(old, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var tasks []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if tasks, err = r.Ctr(ctx, "tasks", "ls"); err == nil {
			break
		}
	}
	if now := r.daemon().Running(); len(now) != 1 || now[0] == old[0] || !strings.Contains(string(tasks), "RUNNING") {
		t.Errorf("after stopping containerd %v: running %v, tasks %v\n%s", old, now, err, tasks)
	}
	stopped = true
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if pids := append(proc.WithArg(r.Socket()), proc.WithArg("/usr/local/bin/pause")...); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	if mounts, _ := MountsUnder(r.Dir); len(mounts) > 0 {
		t.Errorf("mounts left: %v", mounts)
	}
	if after := sockets(); len(after) > len(before) {
		t.Errorf("shim sockets left in %s: %v (before: %v)", ShimSocketDir, after, before)
	}
	if left := slices.DeleteFunc(missing, func(p string) bool { return slices.Contains(missingPaths(hostPaths), p) }); len(left) > 0 {
		t.Errorf("paths made outside the runtime's folder and left: %v", left)
	}
}

// missingPaths lists which of paths do not exist.
func missingPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			out = append(out, p)
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }
