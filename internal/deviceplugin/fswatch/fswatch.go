// Package fswatch keeps an fsnotify watcher on exactly a list of paths
// that changes over time (a device family's sysfs and /dev folders, as
// cards come and go), for the device plugins and the DRA drivers alike.
package fswatch

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// Paths is the set of paths a watcher follows.
type Paths struct {
	w       *fsnotify.Watcher
	watched map[string]bool
	log     *slog.Logger
}

// New follows paths with w; log gets what cannot be watched.
func New(w *fsnotify.Watcher, log *slog.Logger) *Paths {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Paths{w: w, watched: map[string]bool{}, log: log}
}

// Follow watches exactly paths: others it watched are removed, and a
// missing one is tried again next time (its parent's event asks for
// that).
func (p *Paths) Follow(paths []string) {
	want := map[string]bool{}
	for _, path := range paths {
		want[filepath.Clean(path)] = true
	}
	for path := range p.watched {
		if !want[path] {
			_ = p.w.Remove(path)
			delete(p.watched, path)
		}
	}
	for path := range want {
		if p.watched[path] {
			continue
		}
		if err := p.w.Add(path); err == nil {
			p.watched[path] = true
		} else if !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("watching for device changes", "path", path, "error", err)
		}
	}
}

// Has says whether path is followed now.
func (p *Paths) Has(path string) bool { return p.watched[filepath.Clean(path)] }
