package toolchain

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// A patch applies on a fresh machine too, where the module cache does not
// hold the patched module yet: it is downloaded first (here from a proxy
// in a folder; nothing leaves the machine).
func TestWorkspacePatchesAModuleNotYetDownloaded(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root := t.TempDir()
	tool, env := depModule(t, root)
	env = append(os.Environ(), env...)
	work, err := workspace(context.Background(), goBin, tool, env, []Patch{{Module: "example.com/dep", File: "dep.go", Old: "41", New: "42"}}, filepath.Join(root, "out"))
	if err != nil {
		t.Fatalf("patching a module the cache lacks: %v", err)
	}
	data, err := os.ReadFile(work)
	if err != nil || !strings.Contains(string(data), "replace example.com/dep => ") {
		t.Fatalf("go.work %q (%v) does not replace the module", data, err)
	}
	patched, _ := os.ReadFile(filepath.Join(root, "out", "patched", "example.com_dep", "dep.go"))
	if !strings.Contains(string(patched), "Answer = 42") {
		t.Errorf("the patched copy says %q", patched)
	}
}

// depModule is a proxy in a folder of root serving example.com/dep
// v1.0.0, a module requiring it (its folder returned), and the go
// command's environment with that proxy and an empty module cache.
func depModule(t *testing.T, root string) (string, []string) {
	t.Helper()
	src := filepath.Join(root, "src")
	write(t, filepath.Join(src, "go.mod"), "module example.com/dep\n\ngo 1.26\n")
	write(t, filepath.Join(src, "dep.go"), "package dep\n\nconst Answer = 41\n")
	at := filepath.Join(root, "proxy", "example.com", "dep", "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(at, "list"), "v1.0.0\n")
	write(t, filepath.Join(at, "v1.0.0.info"), `{"Version":"v1.0.0"}`)
	write(t, filepath.Join(at, "v1.0.0.mod"), "module example.com/dep\n\ngo 1.26\n")
	zf, err := os.Create(filepath.Join(at, "v1.0.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := modzip.CreateFromDir(zf, module.Version{Path: "example.com/dep", Version: "v1.0.0"}, src); err != nil {
		t.Fatal(err)
	}
	_ = zf.Close()
	tool := filepath.Join(root, "tool")
	write(t, filepath.Join(tool, "go.mod"), "module example.com/tool\n\ngo 1.26\n\nrequire example.com/dep v1.0.0\n")
	write(t, filepath.Join(tool, "go.sum"), "")
	return tool, []string{"GOPROXY=file://" + filepath.Join(root, "proxy"), "GOSUMDB=off", "GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE=" + filepath.Join(root, "modcache"), "GOWORK=off"}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The modules of a toolchain to build later download while the first
// with tools missing builds; one with nothing missing is passed over.
func TestDownloadAhead(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root := t.TempDir()
	tool, env := depModule(t, root)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	built := &Toolchain{SourceDir: t.TempDir(), BinDir: t.TempDir(), Tools: []Tool{}}
	first := t.TempDir()
	write(t, filepath.Join(first, "go.mod"), "module example.com/first\n\ngo 1.26\n")
	write(t, filepath.Join(first, "go.sum"), "")
	building := &Toolchain{SourceDir: first, BinDir: t.TempDir(), Tools: Tools}
	later := &Toolchain{SourceDir: tool, BinDir: t.TempDir(), Tools: []Tool{{Name: "dep", Package: "example.com/dep"}}}
	var said strings.Builder
	DownloadAhead(context.Background(), []*Toolchain{built, building, later}, &said)()
	if _, err := os.Stat(filepath.Join(root, "modcache", "example.com", "dep@v1.0.0", "dep.go")); err != nil {
		t.Errorf("the later toolchain's module was not downloaded: %v", err)
	}
	// The one built first (the first with tools missing) downloads its
	// own as it builds.
	if got := said.String(); got != "toolchain: downloading the modules of dep beside the build\n" {
		t.Errorf("said %q, want only the later toolchain's download", got)
	}
}

// The Vault the dev cluster runs is built without the parts its
// deletions name: with the patched copies in the workspace, nothing the
// two patched packages import reaches the Microsoft Graph SDK, Snowflake
// or a cloud provider's auto-join, while the secrets engines and the
// auth methods Cloister's Vault uses are still there. A pin that moves
// the passages, or another import path to those SDKs, fails here.
func TestVaultIsBuiltWithoutWhatItLeavesOut(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	src, err := filepath.Abs(filepath.Join("..", "..", "..", "hack", "vaulttools"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	env, err := (&Toolchain{SourceDir: src}).patchedEnv(ctx, goBin, Vault.Patches, t.TempDir())
	if err != nil {
		t.Fatalf("patching Vault's modules: %v", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "list", "-deps", "-f", "{{.ImportPath}}",
		"github.com/hashicorp/vault/helper/builtinplugins", "github.com/hashicorp/go-discover")
	cmd.Dir, cmd.Env = src, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	deps := strings.Fields(string(out))
	for _, left := range []string{"github.com/microsoftgraph/", "github.com/snowflakedb/", "github.com/hashicorp/go-discover/provider/"} {
		for _, d := range deps {
			if strings.HasPrefix(d, left) {
				t.Errorf("the patched Vault still imports %s", d)
				break
			}
		}
	}
	for _, kept := range []string{"github.com/hashicorp/vault-plugin-secrets-kv", "github.com/hashicorp/vault/builtin/credential/cert", "github.com/hashicorp/vault/builtin/logical/pki"} {
		if !slices.Contains(deps, kept) {
			t.Errorf("the patched Vault lost %s", kept)
		}
	}
}
