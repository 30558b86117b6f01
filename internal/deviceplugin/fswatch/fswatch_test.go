package fswatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fsnotify/fsnotify"
)

// Follow keeps the watcher on exactly the paths asked for: new ones
// added, dropped ones removed, missing ones added once they exist.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	a, b, later := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "later")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	p := New(w, nil)
	watching := func() []string { l := w.WatchList(); slices.Sort(l); return l }

	p.Follow([]string{a, b + "/", later})
	if got := watching(); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("watching %v, want %v (the missing path left out)", got, []string{a, b})
	}
	if !p.Has(b) || p.Has(later) {
		t.Errorf("Has(b) = %v, Has(later) = %v", p.Has(b), p.Has(later))
	}
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	p.Follow([]string{a, later})
	if got := watching(); !slices.Equal(got, []string{a, later}) {
		t.Fatalf("watching %v, want %v (b dropped, later added once there)", got, []string{a, later})
	}
	if p.Has(b) {
		t.Error("b is still followed")
	}
}
