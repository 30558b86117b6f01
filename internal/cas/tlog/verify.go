package tlog

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"

	tdlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// MaxCheckpoint bounds a checkpoint note: its three lines and a few
// signatures (the log's, the witnesses').
const MaxCheckpoint = 8 << 10

// Checkpoint is a log's signed checkpoint, as a client read it.
type Checkpoint struct {
	Origin string
	Size   int64
	Hash   tlog.Hash
	// Note is the signed note it was read from.
	Note []byte
}

func (c Checkpoint) String() string {
	return fmt.Sprintf("%s at size %d (root %s)", c.Origin, c.Size, c.Hash)
}

// ParseCheckpoint reads a checkpoint of the log origin signed by v; it
// refuses extension lines, which Cloister's logs do not write.
func ParseCheckpoint(data []byte, origin string, v note.Verifier) (Checkpoint, error) {
	if len(data) > MaxCheckpoint {
		return Checkpoint{}, fmt.Errorf("a checkpoint of %d bytes: at most %d", len(data), MaxCheckpoint)
	}
	cp, extra, _, err := tdlog.ParseCheckpoint(data, origin, v)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	// Signatures only in canonical base64: a note's decoder takes stray
	// bits, which would make one checkpoint many byte strings.
	_, sigs, _ := bytes.Cut(data, []byte("\n\n"))
	for _, line := range strings.Split(strings.TrimSuffix(string(sigs), "\n"), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if _, err := base64.StdEncoding.Strict().DecodeString(line[i+1:]); i < 0 || err != nil {
			return Checkpoint{}, errors.New("checkpoint: a signature not in canonical base64")
		}
	}
	switch {
	case len(extra) > 0:
		return Checkpoint{}, errors.New("checkpoint: extension lines, which this log does not write")
	case len(cp.Hash) != tlog.HashSize:
		return Checkpoint{}, fmt.Errorf("checkpoint: a root hash of %d bytes, not %d", len(cp.Hash), tlog.HashSize)
	case cp.Size > math.MaxInt64>>1:
		return Checkpoint{}, fmt.Errorf("checkpoint: size %d is out of range", cp.Size)
	}
	out := Checkpoint{Origin: cp.Origin, Size: int64(cp.Size), Note: data}
	copy(out.Hash[:], cp.Hash)
	return out, nil
}

// VerifyInclusion checks that entry is record n of the tree cp commits to.
func VerifyInclusion(cp Checkpoint, n int64, entry []byte, p tlog.RecordProof) error {
	if n < 0 || n >= cp.Size {
		return fmt.Errorf("entry %d is not in %s", n, cp)
	}
	if err := tlog.CheckRecord(p, cp.Size, cp.Hash, n, tlog.RecordHash(entry)); err != nil {
		return fmt.Errorf("entry %d is not in %s: %w", n, cp, err)
	}
	return nil
}

// ErrInconsistent: two checkpoints of one log that cannot both be true,
// a log rolled back or showing two histories.
var ErrInconsistent = errors.New("the log's checkpoints are inconsistent")

// VerifyConsistency checks that newer extends older: the same log, no
// smaller, and older's tree a prefix of newer's (p proves it).
func VerifyConsistency(older, newer Checkpoint, p tlog.TreeProof) error {
	switch {
	case older.Origin != newer.Origin:
		return fmt.Errorf("checkpoints of two logs: %s and %s", older, newer)
	case newer.Size < older.Size:
		return fmt.Errorf("%w: %s is smaller than %s, seen before", ErrInconsistent, newer, older)
	case newer.Size == older.Size:
		if newer.Hash != older.Hash {
			return fmt.Errorf("%w: %s and %s, seen before", ErrInconsistent, newer, older)
		}
		return nil
	case older.Size == 0:
		return nil
	}
	if err := tlog.CheckTree(p, newer.Size, newer.Hash, older.Size, older.Hash); err != nil {
		return fmt.Errorf("%w: %s does not extend %s, seen before: %w", ErrInconsistent, newer, older, err)
	}
	return nil
}
