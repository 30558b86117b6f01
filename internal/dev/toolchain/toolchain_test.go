package toolchain

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

func readModFile(t *testing.T, path string) *modfile.File {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The components, their staging libraries and Cloister's own client
// libraries must all be one Kubernetes release.
func TestKubeVersionIsPinnedEverywhere(t *testing.T) {
	staging := "v0." + strings.TrimPrefix(KubeVersion, "v1.")

	tools := readModFile(t, "../../../hack/tools/go.mod")
	var kubernetes string
	for _, r := range tools.Require {
		if r.Mod.Path == "k8s.io/kubernetes" {
			kubernetes = r.Mod.Version
		}
	}
	if kubernetes != KubeVersion {
		t.Errorf("hack/tools requires k8s.io/kubernetes %q, toolchain.KubeVersion is %q", kubernetes, KubeVersion)
	}
	replaced := 0
	for _, r := range tools.Replace {
		if strings.HasPrefix(r.Old.Path, "k8s.io/") {
			replaced++
			if r.New.Path != r.Old.Path || r.New.Version != staging {
				t.Errorf("hack/tools replaces %s with %s@%s, want the published %s", r.Old.Path, r.New.Path, r.New.Version, staging)
			}
		}
	}
	if replaced < 20 {
		t.Errorf("hack/tools replaces %d k8s.io staging modules; k8s.io/kubernetes needs all of them replaced", replaced)
	}

	// Staging modules are the k8s.io/* ones versioned v0.<minor>.<patch>
	// (klog is v2, kube-openapi and utils are pseudo-versions).
	main := readModFile(t, "../../../go.mod")
	checked := 0
	for _, r := range main.Require {
		v := r.Mod.Version
		if !strings.HasPrefix(r.Mod.Path, "k8s.io/") || !strings.HasPrefix(v, "v0.") || strings.HasPrefix(v, "v0.0.0-") {
			continue
		}
		checked++
		if v != staging {
			t.Errorf("go.mod requires %s %s, want %s (Kubernetes %s)", r.Mod.Path, v, staging, KubeVersion)
		}
	}
	if checked < 3 {
		t.Errorf("go.mod pins %d Kubernetes staging modules; expected at least api, apimachinery and client-go", checked)
	}
}

func TestLocate(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvCacheDir, cache)
	tc, err := Locate()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "k8s", KubeVersion, "bin"); tc.BinDir != want {
		t.Errorf("BinDir = %q, want %q", tc.BinDir, want)
	}
	// The test runs inside the checkout, so the tools module is found.
	if _, err := os.Stat(filepath.Join(tc.SourceDir, "go.mod")); err != nil {
		t.Errorf("SourceDir %q has no go.mod: %v", tc.SourceDir, err)
	}
	if len(tc.Tools) != len(Tools) {
		t.Errorf("Locate gave %d tools, want %d", len(tc.Tools), len(Tools))
	}
}

// fakeToolsModule writes a tiny module with two main packages: one whose
// package name is its binary name and one that must be renamed, like etcd.
func fakeToolsModule(t *testing.T) (dir string, tools []Tool) {
	t.Helper()
	dir = t.TempDir()
	files := map[string]string{
		"go.mod":             "module example.com/faketools\n\ngo 1.26\n",
		"go.sum":             "",
		"cmd/alpha/main.go":  "package main\n\nfunc main() { println(\"alpha\") }\n",
		"server/v3/main.go":  "package main\n\nfunc main() { println(\"etcd\") }\n",
		"server/v3/extra.go": "package main\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, []Tool{
		{Name: "alpha", Package: "example.com/faketools/cmd/alpha"},
		{Name: "etcd", Package: "example.com/faketools/server/v3"},
	}
}

func TestEnsureBuildsOnceAndRebuildsWhenPinsChange(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to build the fake tools module")
	}
	src, tools := fakeToolsModule(t)
	bin := filepath.Join(t.TempDir(), "k8s", KubeVersion, "bin")
	tc := &Toolchain{BinDir: bin, SourceDir: src, Tools: tools}

	if err := tc.Check(); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("Check on an empty cache = %v, want ErrMissing telling to run make tools", err)
	}
	var log bytes.Buffer
	if err := tc.Ensure(context.Background(), &log); err != nil {
		t.Fatalf("Ensure: %v\n%s", err, log.String())
	}
	for _, tool := range tools {
		out, err := exec.Command(tc.Path(tool.Name)).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tool.Name {
			t.Errorf("%s printed %q (%v), want %q", tool.Name, out, err, tool.Name)
		}
	}
	if err := tc.Check(); err != nil {
		t.Fatalf("Check after Ensure: %v", err)
	}

	// Warm: nothing is rebuilt.
	before, _ := os.Stat(tc.Path("alpha"))
	time.Sleep(10 * time.Millisecond)
	log.Reset()
	if err := tc.Ensure(context.Background(), &log); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(tc.Path("alpha"))
	if !after.ModTime().Equal(before.ModTime()) || log.Len() != 0 {
		t.Errorf("warm Ensure rebuilt (mtime %v -> %v, output %q)", before.ModTime(), after.ModTime(), log.String())
	}

	// A lost binary is rebuilt on its own.
	if err := os.Remove(tc.Path("etcd")); err != nil {
		t.Fatal(err)
	}
	missing, err := tc.Missing()
	if err != nil || len(missing) != 1 || missing[0].Name != "etcd" {
		t.Fatalf("Missing after removing etcd = %v, %v", missing, err)
	}

	// New pins make every binary stale.
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/faketools\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if missing, _ := tc.Missing(); len(missing) != len(tools) {
		t.Errorf("after a go.mod change %d of %d tools are stale, want all", len(missing), len(tools))
	}
}

func TestEnsureWithoutGoSaysWhatToDo(t *testing.T) {
	src, tools := fakeToolsModule(t)
	tc := &Toolchain{BinDir: filepath.Join(t.TempDir(), "bin"), SourceDir: src, Tools: tools}
	t.Setenv("PATH", t.TempDir())
	err := tc.Ensure(context.Background(), &bytes.Buffer{})
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("Ensure without go = %v, want ErrMissing", err)
	}
	for _, want := range []string{"go command is not on PATH", "install Go", "make tools", "alpha, etcd"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestEnsureWithoutCheckoutSaysWhatToDo(t *testing.T) {
	tc := &Toolchain{BinDir: filepath.Join(t.TempDir(), "bin"), Tools: Tools}
	err := tc.Ensure(context.Background(), &bytes.Buffer{})
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("Ensure without a checkout = %v, want ErrMissing", err)
	}
	for _, want := range []string{"no Cloister checkout", EnvCacheDir, "make tools"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestLDFlagsStampKubernetesVersion(t *testing.T) {
	flags := ldflags()
	for _, want := range []string{
		"k8s.io/component-base/version.gitVersion=" + KubeVersion,
		"k8s.io/component-base/version.gitMinor=37",
		"k8s.io/client-go/pkg/version.gitVersion=" + KubeVersion,
	} {
		if !strings.Contains(flags, want) {
			t.Errorf("ldflags %q lack %q", flags, want)
		}
	}
}

func TestProgressCountsPackagesAndForwardsErrors(t *testing.T) {
	var out strings.Builder
	p := &progress{out: &out}
	// Written in odd pieces, as a pipe delivers them.
	for _, chunk := range []string{"k8s.io/api/core/v1\nk8s.io/apim", "achinery/pkg/runtime\n# k8s.io/broken\n", "broken/x.go:3:1: syntax error\n"} {
		if _, err := p.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	done, last := p.snapshot()
	if done != 2 || last != "k8s.io/apimachinery/pkg/runtime" {
		t.Errorf("counted %d, latest %q; want 2, k8s.io/apimachinery/pkg/runtime", done, last)
	}
	if want := "# k8s.io/broken\nbroken/x.go:3:1: syntax error\n"; out.String() != want {
		t.Errorf("forwarded %q, want the compiler's lines %q", out.String(), want)
	}
	line := progressLine("kube-apiserver", 150, 600, 95*time.Second, "k8s.io/api/core/v1")
	if want := "toolchain: kube-apiserver: 150 of 600 packages compiled (25%), 1m35s, latest k8s.io/api/core/v1"; line != want {
		t.Errorf("progress line %q, want %q", line, want)
	}
	// Before go list has counted, the lines go on without a total.
	line = progressLine("containerd", 12, -1, 5*time.Second, "io")
	if want := "toolchain: containerd: 12 packages compiled (of a total still counted), 5s, latest io"; line != want {
		t.Errorf("progress line %q, want %q", line, want)
	}
	// With every package in the build cache, the build only links.
	line = progressLine("cloister-operator", 0, 0, 10*time.Second, "")
	if want := "toolchain: cloister-operator: linking (the build cache holds every package), 10s"; line != want {
		t.Errorf("progress line %q, want %q", line, want)
	}
}

// The progress lines count only what go build must compile: packages the
// build cache holds (another module compiled them) are not in the total.
func TestCountPackagesLeavesOutCachedOnes(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module example.com/counted\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"fmt\"\n\n// " + t.Name() + time.Now().String() + "\nfunc main() { fmt.Println() }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := append(moduleEnv(), "GOFLAGS=")
	flags := append(append([]string{}, BuildFlags...), "-o", filepath.Join(dir, "counted"))
	ctx := context.Background()
	if n := countPackages(ctx, goBin, dir, env, flags, []string{"."}); n < 1 {
		t.Fatalf("before the build: %d packages to compile, want the main package at least", n)
	}
	if err := GoBuild(ctx, goBin, dir, env, flags, []string{"."}, "counted", io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := countPackages(ctx, goBin, dir, env, flags, []string{"."}); n != 0 {
		t.Errorf("after the build: %d packages to compile, want 0: the cache holds them all", n)
	}
}
