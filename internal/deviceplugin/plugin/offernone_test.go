package plugin_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

// During a migration to DRA the plugin offers nothing, and still serves
// what containers hold: allocation, watches and releases reach the mode.
func TestOfferNone(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "w0"), "ok")
	inner := &fileMode{dir: dir}
	m := plugin.OfferNone(inner)
	inv, err := m.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if devs, ok := inv[resource]; !ok || len(devs) != 0 {
		t.Errorf("inventory %v: the resource stays registered, with no device", inv)
	}
	if r, err := m.Allocate(context.Background(), resource, []string{"w0"}); err != nil || len(r.Devices) != 1 {
		t.Errorf("allocate for a container that holds w0: %v %v", r, err)
	}
	if w := m.(plugin.Watcher).WatchPaths(); !slices.Equal(w, []string{dir}) {
		t.Errorf("watch paths %v", w)
	}
	if err := m.(plugin.Releaser).Release(context.Background(), map[string][]string{resource: {"w0"}}); err != nil || len(inner.released) != 1 {
		t.Errorf("release: %v, %d calls", err, len(inner.released))
	}
}
