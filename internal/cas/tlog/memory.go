package tlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
)

// Memory is the largest checkpoint of one log a client has seen, kept in
// File (a signed note), so that the client never takes a smaller tree,
// or one that does not extend it, from that log again: a log rolled back
// to an older state, or showing this client another history, is refused.
type Memory struct{ File string }

// Advance takes cp if it extends the checkpoint remembered (proved from
// cp's tiles, read with fetch), and then remembers cp if it is larger.
func (m Memory) Advance(cp Checkpoint, v note.Verifier, fetch FetchTile) error {
	old, err := os.ReadFile(m.File)
	if errors.Is(err, fs.ErrNotExist) {
		return m.save(cp)
	}
	if err != nil {
		return fmt.Errorf("the checkpoint remembered: %w", err)
	}
	larger, err := Extends(old, cp, v, fetch)
	if err != nil {
		return fmt.Errorf("%w (remembered in %s)", err, m.File)
	}
	if larger {
		return m.save(cp)
	}
	return nil
}

// Extends checks that cp extends seen, a checkpoint of the same log seen
// before (a signed note; nil: none), proving it from cp's tiles read with
// fetch, and says whether cp is the larger, to be remembered instead.
func Extends(seen []byte, cp Checkpoint, v note.Verifier, fetch FetchTile) (bool, error) {
	if len(seen) == 0 {
		return true, nil
	}
	old, err := ParseCheckpoint(seen, cp.Origin, v)
	if err != nil {
		return false, fmt.Errorf("the checkpoint seen before is not of this log (another CAS, or another key): %w", err)
	}
	var p tlog.TreeProof
	if old.Size >= 1 && old.Size < cp.Size {
		if p, err = ConsistencyFromTiles(old, cp, fetch); err != nil {
			return false, fmt.Errorf("proving %s extends %s, seen before: %w", cp, old, err)
		}
	}
	if err := VerifyConsistency(old, cp, p); err != nil {
		return false, err
	}
	return cp.Size > old.Size, nil
}

func (m Memory) save(cp Checkpoint) error {
	if _, err := atomicfile.WriteIfChanged(m.File, cp.Note, 0o644); err != nil {
		return fmt.Errorf("remembering %s: %w", cp, err)
	}
	return nil
}
