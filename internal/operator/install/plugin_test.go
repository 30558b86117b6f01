package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPluginDir(t *testing.T) {
	writable, other := t.TempDir(), t.TempDir()
	readOnly := t.TempDir()
	if err := os.Chmod(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(other, "missing")
	if os.Geteuid() == 0 {
		// root writes anywhere: only the last existing folder counts.
		got, err := PluginDir(strings.Join([]string{writable, readOnly, missing}, ":"))
		if err != nil || got != readOnly {
			t.Errorf("as root: %q, %v", got, err)
		}
		return
	}
	got, err := PluginDir(strings.Join([]string{other, writable, readOnly, missing}, ":"))
	if err != nil || got != writable {
		t.Errorf("got %q, %v; want the last writable %q", got, err, writable)
	}
	if _, err := PluginDir(readOnly + ":" + missing); err == nil || !strings.Contains(err.Error(), "no folder on PATH is writable") {
		t.Errorf("err %v", err)
	}
}

// The plugin is this binary under kubectl's name: kubectl runs it.
func TestInstallPlugin(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "cloister")
	if err := os.WriteFile(self, []byte("#!/bin/sh\necho cloister \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	dst := filepath.Join(bin, PluginName)
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := InstallPlugin(self, dst); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(dst, "version").Output()
	if err != nil || string(out) != "cloister version\n" {
		t.Errorf("running the plugin: %q, %v", out, err)
	}
	if entries, _ := os.ReadDir(bin); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}
