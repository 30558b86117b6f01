package toolchain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Ensure builds whatever Missing reports, holding a lock so concurrent
// callers (two `make` targets, a test and the CLI) build once. Progress goes
// to w. When nothing is missing it returns at once.
func (t *Toolchain) Ensure(ctx context.Context, w io.Writer) error {
	missing, err := t.Missing()
	if err != nil || len(missing) == 0 {
		return err
	}
	if t.SourceDir == "" {
		return fmt.Errorf("%w: %s not in %s and no Cloister checkout (hack/tools/go.mod) to build them from; "+
			"run `make tools` in a checkout of github.com/cloister-cc/cloister and set %s=<checkout>/.cache, or set %s to the checkout",
			ErrMissing, names(missing), t.BinDir, EnvCacheDir, EnvSourceDir)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("%w: %s not in %s and cannot be built: the go command is not on PATH; "+
			"install Go 1.26 or newer (https://go.dev/dl/) and run `make tools`", ErrMissing, names(missing), t.BinDir)
	}
	if err := os.MkdirAll(t.BinDir, 0o755); err != nil { //nolint:gosec // tool binaries others run
		return fmt.Errorf("creating tool cache: %w", err)
	}
	unlock, err := Lock(filepath.Join(filepath.Dir(t.BinDir), ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	// Another process may have finished the build while we waited.
	if missing, err = t.Missing(); err != nil || len(missing) == 0 {
		return err
	}
	return t.build(ctx, goBin, missing, w)
}

func (t *Toolchain) build(ctx context.Context, goBin string, tools []Tool, w io.Writer) error {
	start := time.Now()
	_, _ = fmt.Fprintf(w, "toolchain: building %s from %s into %s (cold, on 2 cores: the control plane ~8 min, the kubelet ~1 min after it, containerd and CNI ~1 min, the Vault server ~4 min)\n",
		names(tools), t.SourceDir, t.BinDir)
	staging, err := os.MkdirTemp(filepath.Dir(t.BinDir), "build-")
	if err != nil {
		return fmt.Errorf("creating build folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(staging) }()

	var batch []string
	var single []Tool
	for _, tool := range tools {
		if tool.Name == lastElem(tool.Package) && len(tool.Patches) == 0 {
			batch = append(batch, tool.Package)
		} else {
			single = append(single, tool)
		}
	}
	// One invocation for all tools whose package name is their binary name
	// lets the go command compile shared dependencies once, in parallel.
	if len(batch) > 0 {
		if err := t.goBuild(ctx, goBin, staging+string(filepath.Separator), batch, w); err != nil {
			return err
		}
	}
	for _, tool := range single {
		if err := t.goBuild(ctx, goBin, filepath.Join(staging, tool.Name), []string{tool.Package}, w, tool.Patches...); err != nil {
			return err
		}
	}
	for _, tool := range tools {
		if err := os.Rename(filepath.Join(staging, tool.Name), t.Path(tool.Name)); err != nil {
			return fmt.Errorf("installing %s: %w", tool.Name, err)
		}
	}
	digest, err := t.sourcesDigest()
	if err != nil {
		return err
	}
	// The stamp goes last: an interrupted build leaves the cache incomplete
	// and the next Ensure rebuilds.
	if err := os.WriteFile(filepath.Join(t.BinDir, sourcesStamp), []byte(digest+"\n"), 0o644); err != nil { //nolint:gosec // the sources stamp holds a digest
		return fmt.Errorf("recording tool sources: %w", err)
	}
	_, _ = fmt.Fprintf(w, "toolchain: built %d tools in %s\n", len(tools), time.Since(start).Round(time.Second))
	return nil
}

// BuildEnv and BuildFlags are the one configuration Go code is built
// with here, the Kubernetes tools and Cloister's own binaries alike (and
// make's every go run): static, with no build paths in the binaries.
// Whatever builds with the same configuration reuses Go's build cache.
var (
	BuildEnv   = []string{"CGO_ENABLED=0"}
	BuildFlags = []string{"-trimpath"}
)

// moduleEnv is the go command's environment in a tool module: the one
// build configuration, and no workspace of the checkout around it.
func moduleEnv() []string {
	return append(append(os.Environ(), BuildEnv...), "GOWORK=off")
}

// patchedEnv is moduleEnv with patches applied: a workspace in dir whose
// module copies carry them.
func (t *Toolchain) patchedEnv(ctx context.Context, goBin string, patches []Patch, dir string) ([]string, error) {
	env := moduleEnv()
	if len(patches) == 0 {
		return env, nil
	}
	work, err := workspace(ctx, goBin, t.SourceDir, env, patches, dir)
	if err != nil {
		return nil, err
	}
	return append(env, "GOWORK="+work), nil
}

func (t *Toolchain) goBuild(ctx context.Context, goBin, out string, pkgs []string, w io.Writer, patches ...Patch) error {
	what := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		what[i] = lastElem(pkg)
	}
	flags := append(append([]string{}, BuildFlags...), "-ldflags", ldflags(), "-o", out)
	env, err := t.patchedEnv(ctx, goBin, patches, filepath.Dir(out))
	if err != nil {
		return err
	}
	if err := GoBuild(ctx, goBin, t.SourceDir, env, flags, pkgs, strings.Join(what, ", "), w); err != nil {
		return fmt.Errorf("building %s in %s: %w (see the go output above)", strings.Join(pkgs, " "), t.SourceDir, err)
	}
	return nil
}

// GoBuild runs go build -v with flags on pkgs in dir, and says every few
// seconds how many of their packages are compiled: the Kubernetes tools
// and Cloister's own binaries report the same way on a cold cache.
func GoBuild(ctx context.Context, goBin, dir string, env, flags, pkgs []string, what string, w io.Writer) error {
	args := append(append([]string{"build", "-v"}, flags...), pkgs...)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir, cmd.Env = dir, env
	p := &progress{out: w}
	cmd.Stdout, cmd.Stderr = p, p
	// Said at once: the first count comes only after progressEvery.
	_, _ = fmt.Fprintf(w, "toolchain: %s: compiling (a line every %s)\n", what, progressEvery)
	stop := make(chan struct{})
	// The count runs beside the build, not before it.
	total := func() int { return countPackages(ctx, goBin, dir, env, flags, pkgs) }
	go reportProgress(w, what, total, p, stop)
	err := cmd.Run()
	close(stop)
	return err
}

// ldflags stamps the Kubernetes version into the binaries: kwokctl reads
// `kube-apiserver --version` to choose flags, and an unstamped build reports
// v0.0.0-master.
func ldflags() string {
	v := strings.TrimPrefix(KubeVersion, "v")
	parts := strings.SplitN(v, ".", 3)
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+KubeVersion,
			"-X", pkg+".gitMajor="+parts[0],
			"-X", pkg+".gitMinor="+parts[1],
			"-X", pkg+".gitTreeState=clean",
		)
	}
	flags = append(flags, "-X", "sigs.k8s.io/kwok/pkg/consts.KubeVersion="+v)
	return strings.Join(flags, " ")
}

func lastElem(pkg string) string {
	return pkg[strings.LastIndex(pkg, "/")+1:]
}

// Lock takes an exclusive advisory lock on path (made if missing, with
// its folder), blocking until it is free: builds into the cache, and the
// real-node tests of several packages, take turns with it.
func Lock(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // the lock's folder is the shared tool cache
		return nil, fmt.Errorf("creating the folder of lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644) //nolint:gosec // an empty lock file
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// DownloadAhead starts downloading, in the background, the modules of the
// toolchains of chains (to be built in that order) that have tools
// missing, but the first such, which downloads its own as it builds: a
// cold build spends minutes waiting for the module proxy, which can go on
// while another toolchain compiles. Each module once. wait returns once
// the downloads are done; a failed one is left for the build to report.
func DownloadAhead(ctx context.Context, chains []*Toolchain, w io.Writer) (wait func()) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return func() {}
	}
	var wg sync.WaitGroup
	seen := map[string]bool{}
	first := true
	for _, t := range chains {
		if missing, err := t.Missing(); err != nil || len(missing) == 0 || t.SourceDir == "" || seen[t.SourceDir] {
			continue
		}
		seen[t.SourceDir] = true
		if first { // built first: it downloads its own
			first = false
			continue
		}
		_, _ = fmt.Fprintf(w, "toolchain: downloading the modules of %s beside the build\n", names(t.Tools))
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, goBin, "mod", "download")
			cmd.Dir, cmd.Env = t.SourceDir, moduleEnv()
			_ = cmd.Run() // the build downloads again, and says what fails
		})
	}
	return wg.Wait
}
