package runtimeclass

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/cloister-cc/cloister/internal/dev/realnode"
)

// On a node's filesystem (a folder standing in for the host root): the
// handler's drop-in lands beside the configuration, which imports it;
// installing again changes nothing; uninstalling removes the drop-in.
func TestInstallerOnANodesFiles(t *testing.T) {
	root := t.TempDir()
	in := &Installer{Root: root}
	h, _ := PlatformHandler("sim", ClassName("sim", "v1"))
	if _, err := in.Install(h); err == nil || !strings.Contains(err.Error(), "no containerd configuration at /etc/containerd/config.toml") {
		t.Fatalf("without a configuration: %v", err)
	}
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(v2Config), 0o600); err != nil {
		t.Fatal(err)
	}

	changed, err := in.Install(h)
	if err != nil || !changed {
		t.Fatalf("install: %v %v", changed, err)
	}
	dropIn, err := os.ReadFile(filepath.Join(root, "etc/containerd/conf.d", h.Name+".toml"))
	if err != nil || !strings.Contains(string(dropIn), `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.`+h.Name+`]`) {
		t.Errorf("drop-in %v:\n%s", err, dropIn)
	}
	var main struct{ Imports []string }
	data, _ := os.ReadFile(cfg)
	if _, err := toml.Decode(string(data), &main); err != nil {
		t.Fatal(err)
	}
	if len(main.Imports) != 1 || main.Imports[0] != "/etc/containerd/conf.d/*.toml" {
		t.Errorf("imports %v", main.Imports)
	}
	if info, _ := os.Stat(cfg); info.Mode().Perm() != 0o600 {
		t.Errorf("the configuration's mode changed to %v", info.Mode().Perm())
	}
	if changed, err := in.Install(h); err != nil || changed {
		t.Errorf("second install: changed %v, %v", changed, err)
	}
	if changed, err := in.Uninstall(h.Name); err != nil || !changed {
		t.Errorf("uninstall: %v %v", changed, err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/containerd/conf.d", h.Name+".toml")); !os.IsNotExist(err) {
		t.Errorf("the drop-in is still there: %v", err)
	}
	if changed, err := in.Uninstall(h.Name); err != nil || changed {
		t.Errorf("second uninstall: %v %v", changed, err)
	}
}

// The sim handler is the node's default runtime under another name: on the
// real node that keeps runc's root in the node's folder (and elsewhere
// the cgroup driver the kubelet uses).
func TestSimHandlerCopiesTheDefaultRuntime(t *testing.T) {
	root := t.TempDir()
	node := &realnode.Runtime{Dir: "/node", BinDir: "/bin", SandboxImage: "pause"}
	cfg := filepath.Join(root, "node/containerd.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, node.Config(), 0o600); err != nil {
		t.Fatal(err)
	}
	in := &Installer{Root: root, ConfigPath: "/node/containerd.toml"}
	h, _ := PlatformHandler(Sim, ClassName(Sim, "v1"))
	if _, err := in.Install(h); err != nil {
		t.Fatal(err)
	}
	var doc configDoc
	data, _ := os.ReadFile(filepath.Join(root, in.DropInPath(h.Name)))
	if _, err := toml.Decode(string(data), &doc); err != nil {
		t.Fatal(err)
	}
	rt := doc.Plugins["io.containerd.cri.v1.runtime"].Containerd.Runtimes[h.Name]
	opts, _ := rt["options"].(map[string]any)
	if rt["runtime_type"] != "io.containerd.runc.v2" || opts["Root"] != node.RuncRoot() {
		t.Errorf("sim handler %v, want runc with Root %s:\n%s", rt, node.RuncRoot(), data)
	}
	if s, err := Socket(node.Config()); err != nil || s != node.Socket() {
		t.Errorf("socket %q %v, want %s", s, err, node.Socket())
	}
	if s, _ := Socket([]byte(v2Config)); s != DefaultSocket {
		t.Errorf("socket of a configuration without one: %q", s)
	}
}
