package nodeinstaller

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

func TestWhichContainerdReadsTheConfiguration(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"/usr/bin/containerd"}, true},
		{[]string{"/usr/bin/containerd", "--config", "/etc/containerd/config.toml"}, true},
		{[]string{"containerd", "-c", "/node/containerd.toml"}, false},
		{[]string{"containerd", "--config=/etc/containerd/./config.toml", "--log-level", "debug"}, true},
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io"}, false},
		{[]string{"containerd", "config", "dump"}, false},
		{[]string{"/usr/bin/ctr", "version"}, false},
	} {
		argv := make([][]byte, len(tc.argv))
		for i, a := range tc.argv {
			argv[i] = []byte(a)
		}
		if got := isContainerd(argv, runtimeclass.DefaultConfigPath); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.argv, got, tc.want)
		}
	}
}

// A failure is the pod's termination message (the operator shows it per
// node) and leaves the host's files as they were.
func TestFailureIsTheTerminationMessage(t *testing.T) {
	root := t.TempDir()
	msg := filepath.Join(t.TempDir(), "termination-log")
	cfg := Config{Platform: runtimeclass.Sim, Handler: runtimeclass.ClassName(runtimeclass.Sim, "v1"), Root: root, ConfigPath: "/etc/containerd/config.toml",
		Probe: "127.0.0.1:0", TerminationLog: msg, Timeout: time.Second}
	err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler))
	data, _ := os.ReadFile(msg)
	if err == nil || !strings.Contains(string(data), "/etc/containerd/config.toml") {
		t.Fatalf("error %v, termination message %q", err, data)
	}

	// A configuration without a containerd reading it: the handler is
	// taken out again rather than left for the next restart to trip on.
	conf := filepath.Join(root, "etc/containerd/config.toml")
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("version = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.ConfigPath = "/etc/containerd/config.toml"
	err = Run(context.Background(), cfg, slog.New(slog.DiscardHandler))
	data, _ = os.ReadFile(msg)
	if err == nil || !strings.Contains(string(data), "taken out again") || !strings.Contains(string(data), "no containerd with the configuration") {
		t.Fatalf("error %v, termination message %q", err, data)
	}
	in := &runtimeclass.Installer{Root: root, ConfigPath: cfg.ConfigPath}
	if _, err := os.Stat(filepath.Join(root, in.DropInPath(runtimeclass.ClassName(runtimeclass.Sim, "v1")))); !os.IsNotExist(err) {
		t.Errorf("the drop-in stayed: %v", err)
	}
}

// A handler installed before, with containerd not answering (restarting,
// say): the installer fails and retries, and takes nothing out.
func TestInstalledBeforeIsKeptWhileContainerdDoesNotAnswer(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "etc/containerd/config.toml")
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("version = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := runtimeclass.ClassName(runtimeclass.Sim, "v1")
	in := &runtimeclass.Installer{Root: root}
	h, _ := runtimeclass.PlatformHandler(runtimeclass.Sim, name)
	if _, err := in.Install(h); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Platform: runtimeclass.Sim, Handler: name, Root: root, ConfigPath: runtimeclass.DefaultConfigPath, Probe: "127.0.0.1:0", Timeout: time.Second}
	err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "containerd does not answer") {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, in.DropInPath(name))); err != nil {
		t.Errorf("the drop-in went: %v", err)
	}
}
