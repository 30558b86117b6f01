package collateral

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cloister-cc/cloister/internal/attest/verify"
)

// Folder is collateral an operator keeps in a folder (CAS's
// --collateral-dir, a mounted ConfigMap): read once, read again when the
// folder changes, and never moved backwards by a change: Intel collateral
// older than what it held (by tcbEvaluationDataNumber) is refused, and the
// contents before it are served on. It implements verify.Options.Folder.
type Folder struct {
	Dir string
	// Root replaces Intel's root for the marks' check (tests); nil:
	// Intel's.
	Root *x509.Certificate
	Log  *slog.Logger

	mu       sync.RWMutex
	contents verify.FolderContents
	err      error // the last read's failure, served while nothing was read
	loaded   bool
	good     bool // contents were read
	marks    Marks
}

// settleFolder is how long a burst of changes (a ConfigMap's atomic swap,
// an operator copying several files) may last before the folder is read.
const settleFolder = 200 * time.Millisecond

// Contents is what the folder held at its last good read.
func (f *Folder) Contents() (verify.FolderContents, error) {
	f.mu.RLock()
	loaded := f.loaded
	f.mu.RUnlock()
	if !loaded {
		f.Reload()
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.good {
		return f.contents, f.err
	}
	return f.contents, nil
}

// Err is the last read's failure, nil after a good one: what the folder's
// contents would be, had it been taken.
func (f *Folder) Err() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.err
}

// Reload reads the folder and takes what it holds unless it moves Intel
// collateral backwards; a read that fails keeps what was read before.
func (f *Folder) Reload() {
	c, err := verify.ReadFolder(f.Dir)
	if err == nil && len(c.Intel.TCBInfo) > 0 {
		// Collateral that does not verify (a half-copied folder, a wrong
		// file) is taken all the same: the verifier names what is wrong
		// with it. Only what Intel signed moves the marks.
		if v, verr := verifyVersion(c.Intel, f.Root); verr == nil {
			err = f.marks.Admit(v)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loaded = true
	if err != nil {
		f.err = fmt.Errorf("collateral folder %s: %w", f.Dir, err)
		f.logger().Warn("collateral folder: not taken; serving what it held before", "dir", f.Dir, "error", err)
		return
	}
	f.contents, f.err, f.good = c, nil, true
}

// Watch reads the folder again after each change until ctx ends.
func (f *Folder) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching collateral: %w", err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(f.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", f.Dir, err)
	}
	// Watch before the first read, so no change between the two is lost.
	f.Reload()
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Events:
			settle = time.After(settleFolder)
		case err := <-w.Errors:
			f.logger().Warn("collateral folder: watch error; reading it again", "dir", f.Dir, "error", err)
			settle = time.After(settleFolder)
		case <-settle:
			settle = nil
			f.Reload()
		}
	}
}

func (f *Folder) logger() *slog.Logger {
	if f.Log != nil {
		return f.Log
	}
	return slog.New(slog.DiscardHandler)
}
