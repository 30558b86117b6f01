package dra

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cloister-cc/cloister/internal/deviceplugin/fswatch"
)

// settle gathers a burst of file events (a card's folder appearing with
// its queues) into one scan.
const settle = 50 * time.Millisecond

// watch follows the family's paths: a change inside one asks for a scan.
type watch struct {
	w     *fsnotify.Watcher
	paths *fswatch.Paths
	log   *slog.Logger
	// kick has a value once files changed since the last scan.
	kick chan struct{}
}

func newWatch(log *slog.Logger) (*watch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching files: %w", err)
	}
	wa := &watch{w: w, paths: fswatch.New(w, log), log: log, kick: make(chan struct{}, 1)}
	go wa.run()
	return wa, nil
}

func (w *watch) close() { _ = w.w.Close() }

// follow watches exactly paths; missing ones are tried again next time.
func (w *watch) follow(paths []string) { w.paths.Follow(paths) }

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
