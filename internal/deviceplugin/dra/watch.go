package dra

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle gathers a burst of file events (a card's folder appearing with
// its queues) into one scan.
const settle = 50 * time.Millisecond

// watch follows the family's paths: a change inside one asks for a scan.
type watch struct {
	w       *fsnotify.Watcher
	watched map[string]bool
	log     *slog.Logger
	// kick has a value once files changed since the last scan.
	kick chan struct{}
}

func newWatch(log *slog.Logger) (*watch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching files: %w", err)
	}
	wa := &watch{w: w, watched: map[string]bool{}, log: log, kick: make(chan struct{}, 1)}
	go wa.run()
	return wa, nil
}

func (w *watch) close() { _ = w.w.Close() }

// follow watches exactly paths; missing ones are tried again next time.
func (w *watch) follow(paths []string) {
	want := map[string]bool{}
	for _, p := range paths {
		want[filepath.Clean(p)] = true
	}
	for p := range w.watched {
		if !want[p] {
			_ = w.w.Remove(p)
			delete(w.watched, p)
		}
	}
	for p := range want {
		if w.watched[p] {
			continue
		}
		if err := w.w.Add(p); err == nil {
			w.watched[p] = true
		} else if !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("watching for device changes", "path", p, "error", err)
		}
	}
}

// run turns bursts of events into kicks: one, settle after the first.
func (w *watch) run() {
	for {
		select {
		case _, ok := <-w.w.Events:
			if !ok {
				return
			}
			time.Sleep(settle)
		drain:
			for {
				select {
				case _, ok := <-w.w.Events:
					if !ok {
						return
					}
				default:
					break drain
				}
			}
			select {
			case w.kick <- struct{}{}:
			default:
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			w.log.Warn("file watcher", "error", err)
		}
	}
}
