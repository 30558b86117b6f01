package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// Plugins run as users of their own, never root: one cannot open the
// Nitro Secure Module (root's only, as in an enclave), and what it leaves
// behind, out of its process group too (setsid), ends when it stops.
// Needs root, to run processes as other users.
func TestPluginsRunAsTheirOwnUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: running plugins as other users needs root")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nsm := filepath.Join(dir, "nsm")
	if err := os.WriteFile(nsm, []byte("the module"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, logs := newOrchestrator(t)
	o.PluginUIDBase = 61000
	m := testManifest(
		shPlugin("reader", "cat "+nsm+" && echo READ-THE-MODULE; id -u; exit 7", "Never"),
		shPlugin("leaver", "setsid sleep 300 & echo started; sleep 300", "Always"),
	)
	if err := o.Apply(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, o, "reader", func(p manifest.PluginStatus) bool { return p.State == manifest.PluginFailed })
	if l := logs.String(); strings.Contains(l, "READ-THE-MODULE") || !strings.Contains(l, "61000") {
		t.Errorf("the reader plugin (uid 61000) read the module, or ran as another user:\n%s", l)
	}
	waitPlugin(t, o, "leaver", func(p manifest.PluginStatus) bool { return p.State == manifest.PluginRunning })
	deadline := time.Now().Add(10 * time.Second)
	for len(proc.OfUser(61001)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the leaver's processes: %v", proc.OfUser(61001))
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.Stop()
	if left := proc.OfUser(61001); len(left) != 0 {
		t.Errorf("processes of the stopped plugin left: %v", left)
	}
}
