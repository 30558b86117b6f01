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
	seen, err := ParseCheckpoint(old, cp.Origin, v)
	if err != nil {
		return fmt.Errorf("the checkpoint remembered in %s is not of this log (another CAS, or another key): %w", m.File, err)
	}
	var p tlog.TreeProof
	if seen.Size >= 1 && seen.Size < cp.Size {
		if p, err = ConsistencyFromTiles(seen, cp, fetch); err != nil {
			return fmt.Errorf("proving %s extends %s, seen before: %w", cp, seen, err)
		}
	}
	if err := VerifyConsistency(seen, cp, p); err != nil {
		return err
	}
	if cp.Size > seen.Size {
		return m.save(cp)
	}
	return nil
}

func (m Memory) save(cp Checkpoint) error {
	if _, err := atomicfile.WriteIfChanged(m.File, cp.Note, 0o644); err != nil {
		return fmt.Errorf("remembering %s: %w", cp, err)
	}
	return nil
}
