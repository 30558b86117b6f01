// Package toolchain owns the pinned Kubernetes components Cloister runs and
// tests against (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubectl, kwok, kwokctl, controller-gen): where their cached
// binaries live, whether they are complete and current, and how to build
// them from the hack/tools Go module when they are not.
package toolchain

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cloister-cc/cloister/internal/base/version"
)

// KubeVersion is the Kubernetes release of the components (defined in
// internal/base/version).
const KubeVersion = version.Kubernetes

// Tool is one binary built from the hack/tools module.
type Tool struct {
	Name    string // file name in the bin folder
	Package string // main package in hack/tools' build list
	// Patches fix what a dependency's release lacks, for this build only.
	Patches []Patch
}

// Tools are the binaries `make tools` builds, in build order.
var Tools = []Tool{
	{Name: "kube-apiserver", Package: "k8s.io/kubernetes/cmd/kube-apiserver"},
	{Name: "kube-controller-manager", Package: "k8s.io/kubernetes/cmd/kube-controller-manager"},
	{Name: "kube-scheduler", Package: "k8s.io/kubernetes/cmd/kube-scheduler"},
	{Name: "kubectl", Package: "k8s.io/kubernetes/cmd/kubectl"},
	{Name: "kwok", Package: "sigs.k8s.io/kwok/cmd/kwok"},
	{Name: "kwokctl", Package: "sigs.k8s.io/kwok/cmd/kwokctl"},
	{Name: "controller-gen", Package: "sigs.k8s.io/controller-tools/cmd/controller-gen"},
	// etcd's main package is the module root, so `go build -o DIR/` would
	// name it "server"; it is built on its own with an explicit output name.
	{Name: "etcd", Package: "go.etcd.io/etcd/server/v3"},
}

// Environment variables that relocate the toolchain.
const (
	// EnvCacheDir overrides the cache root (default: .cache in the checkout).
	EnvCacheDir = "CLOISTER_CACHE_DIR"
	// EnvSourceDir points at a Cloister checkout when neither the working
	// directory nor the executable lies inside one.
	EnvSourceDir = "CLOISTER_SOURCE_DIR"
)

// sourcesStamp records which hack/tools go.mod/go.sum the binaries were
// built from, so a version bump rebuilds instead of silently reusing.
const sourcesStamp = ".sources"

// ErrMissing is wrapped by errors about tools that are not in the cache.
var ErrMissing = errors.New("kubernetes tools missing")

// Toolchain is the cache folder of the pinned release and the module it is
// built from.
type Toolchain struct {
	// CacheRoot holds everything Cloister caches: k8s/<version>/bin, dev clusters.
	CacheRoot string
	// BinDir is CacheRoot/k8s/<KubeVersion>/bin.
	BinDir string
	// SourceDir is the hack/tools module of a Cloister checkout, or "" when
	// none was found (binaries must then already be in BinDir).
	SourceDir string
	// Tools are the binaries to provide; Locate sets the package's Tools.
	Tools []Tool
}

// Locate finds the checkout and cache the way the CLI and tests do: the
// environment first, then the working directory, then the executable.
func Locate() (*Toolchain, error) {
	checkout := findCheckout()
	root := os.Getenv(EnvCacheDir)
	switch {
	case root != "":
	case checkout != "":
		root = filepath.Join(checkout, ".cache")
	default:
		userCache, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("finding a cache folder: %w; set %s", err, EnvCacheDir)
		}
		root = filepath.Join(userCache, "cloister")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("resolving cache folder %q: %w", root, err)
	}
	t := &Toolchain{CacheRoot: root, BinDir: filepath.Join(root, "k8s", KubeVersion, "bin"), Tools: Tools}
	if checkout != "" {
		t.SourceDir = filepath.Join(checkout, "hack", "tools")
	}
	return t, nil
}

// findCheckout returns the root of a Cloister checkout or "".
func findCheckout() string {
	if dir := os.Getenv(EnvSourceDir); dir != "" {
		if isCheckout(dir) {
			return dir
		}
	}
	if wd, err := os.Getwd(); err == nil {
		if dir := walkUp(wd); dir != "" {
			return dir
		}
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			return walkUp(filepath.Dir(exe))
		}
	}
	return ""
}

func walkUp(dir string) string {
	for {
		if isCheckout(dir) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func isCheckout(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "hack", "tools", "go.mod"))
	return err == nil
}

// Path is where the named tool's binary lives.
func (t *Toolchain) Path(name string) string {
	return filepath.Join(t.BinDir, name)
}

// Missing lists the tools that must be (re)built: absent binaries, or all of
// them when the cache was built from other hack/tools sources.
func (t *Toolchain) Missing() ([]Tool, error) {
	if t.SourceDir != "" {
		want, err := t.sourcesDigest()
		if err != nil {
			return nil, err
		}
		got, err := os.ReadFile(filepath.Join(t.BinDir, sourcesStamp))
		if err != nil || strings.TrimSpace(string(got)) != want {
			return t.Tools, nil
		}
	}
	var missing []Tool
	for _, tool := range t.Tools {
		if fi, err := os.Stat(t.Path(tool.Name)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, tool)
		}
	}
	return missing, nil
}

// Check returns nil when every tool is present and current, and otherwise
// an error wrapping ErrMissing that says how to build them.
func (t *Toolchain) Check() error {
	missing, err := t.Missing()
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s not built in %s; run `make tools` (a cold build takes about 8 minutes on 2 cores)",
		ErrMissing, names(missing), t.BinDir)
}

// sourcesDigest identifies the hack/tools module contents that decide
// what gets built.
func (t *Toolchain) sourcesDigest() (string, error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum"} {
		f, err := os.Open(filepath.Join(t.SourceDir, name))
		if err != nil {
			return "", fmt.Errorf("reading tool pins: %w", err)
		}
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			return "", fmt.Errorf("reading tool pins: %w", err)
		}
	}
	for _, tool := range t.Tools {
		_, _ = fmt.Fprintf(h, "%s=%s\n", tool.Name, tool.Package)
		for _, p := range tool.Patches {
			_, _ = fmt.Fprintf(h, "patch %s\n", p.id())
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func names(tools []Tool) string {
	n := make([]string, len(tools))
	for i, tool := range tools {
		n[i] = tool.Name
	}
	return strings.Join(n, ", ")
}
