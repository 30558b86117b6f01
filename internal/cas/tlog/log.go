// Package tlog is CAS's transparency log: the entries CAS appends for what
// an owner must be able to audit (policy versions, board changes, init,
// recovery, restore, CAS's identity), as a Merkle tree with RFC 6962's
// hashing (Certificate Transparency's, Go's checksum database's), kept in
// CAS's state beside what they record and so replicated as it is, read as
// C2SP tlog-tiles and checkpoints (C2SP tlog-checkpoint, signed notes).
// The tree and its proofs are golang.org/x/mod/sumdb/tlog's; clients check
// them with transparency-dev's independent implementation.
package tlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	tdlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Where the log lives in CAS's state.
const (
	sizeBucket  = "tlog"
	sizeKey     = "size"
	hashBucket  = "tlog-hashes"
	entryBucket = "tlog-entries"
	cosignedKey = "cosigned" // in sizeBucket: the checkpoint the witnesses cosigned last
)

// MaxEntry bounds an entry: an entry bundle prefixes each with its length
// in two bytes.
const MaxEntry = 1<<16 - 1

// Reader reads a transaction of CAS's state (records.Tx's reads).
type Reader interface {
	Get(bucket, key string) ([]byte, error)
}

// Writer also writes one (records.Tx).
type Writer interface {
	Reader
	Put(bucket, key string, value []byte) error
}

func indexKey(i int64) string { return fmt.Sprintf("%016x", i) }

// Size is the number of entries in the log.
func Size(tx Reader) (int64, error) {
	b, err := tx.Get(sizeBucket, sizeKey)
	switch {
	case err != nil:
		return 0, err
	case b == nil:
		return 0, nil
	case len(b) != 8:
		return 0, fmt.Errorf("the log's size record has %d bytes", len(b))
	}
	u := binary.BigEndian.Uint64(b)
	if u > math.MaxInt64>>1 {
		return 0, errors.New("the log's size record is out of range")
	}
	return int64(u), nil
}

// Append adds entry as the next record in the same transaction as what
// it records, and returns its index.
func Append(tx Writer, entry []byte) (int64, error) {
	if len(entry) == 0 || len(entry) > MaxEntry {
		return 0, fmt.Errorf("a log entry of %d bytes: 1 to %d", len(entry), MaxEntry)
	}
	n, err := Size(tx)
	if err != nil {
		return 0, err
	}
	hashes, err := tlog.StoredHashes(n, entry, hashReader{tx})
	if err != nil {
		return 0, fmt.Errorf("hashing log entry %d: %w", n, err)
	}
	base := tlog.StoredHashCount(n)
	for i, h := range hashes {
		if err := tx.Put(hashBucket, indexKey(base+int64(i)), h[:]); err != nil {
			return 0, err
		}
	}
	if err := tx.Put(entryBucket, indexKey(n), entry); err != nil {
		return 0, err
	}
	size := make([]byte, 8)
	binary.BigEndian.PutUint64(size, uint64(n+1)) //nolint:gosec // a size is not negative
	if err := tx.Put(sizeBucket, sizeKey, size); err != nil {
		return 0, err
	}
	return n, nil
}

// ReadEntry is record n.
func ReadEntry(tx Reader, n int64) ([]byte, error) {
	b, err := tx.Get(entryBucket, indexKey(n))
	if err == nil && b == nil {
		err = fmt.Errorf("log entry %d is missing", n)
	}
	return b, err
}

// TreeHash is the root of the tree of the first size entries.
func TreeHash(tx Reader, size int64) (tlog.Hash, error) {
	if err := within(tx, size); err != nil {
		return tlog.Hash{}, err
	}
	return tlog.TreeHash(size, hashReader{tx})
}

// ProveInclusion proves entry n is in the tree of size entries.
func ProveInclusion(tx Reader, size, n int64) (tlog.RecordProof, error) {
	if err := within(tx, size); err != nil {
		return nil, err
	}
	if n < 0 || n >= size {
		return nil, fmt.Errorf("entry %d is not in a tree of %d", n, size)
	}
	return tlog.ProveRecord(size, n, hashReader{tx})
}

// ProveConsistency proves the tree of old entries is a prefix of the tree
// of size entries.
func ProveConsistency(tx Reader, size, old int64) (tlog.TreeProof, error) {
	if err := within(tx, size); err != nil {
		return nil, err
	}
	if old < 1 || old > size {
		return nil, fmt.Errorf("a tree of %d is not a prefix of one of %d", old, size)
	}
	return tlog.ProveTree(size, old, hashReader{tx})
}

// within checks a tree of size entries exists in the log.
func within(tx Reader, size int64) error {
	n, err := Size(tx)
	if err != nil {
		return err
	}
	if size < 0 || size > n {
		return fmt.Errorf("the log has %d entries, not %d", n, size)
	}
	return nil
}

// Sign is the log's checkpoint now, as a note signed by s: the origin,
// the size and the root hash (C2SP tlog-checkpoint).
func Sign(tx Reader, origin string, s note.Signer) ([]byte, error) {
	n, err := Size(tx)
	if err != nil {
		return nil, err
	}
	root, err := TreeHash(tx, n)
	if err != nil {
		return nil, err
	}
	text := tdlog.Checkpoint{Origin: origin, Size: uint64(n), Hash: root[:]}.Marshal() //nolint:gosec // a size is not negative
	return note.Sign(&note.Note{Text: string(text)}, s)
}

// Cosigned is the latest checkpoint kept with its witnesses'
// cosignatures (KeepCosigned), its size and when it was kept; nil and 0
// when none is.
func Cosigned(tx Reader) (signed []byte, size int64, at time.Time, err error) {
	raw, err := tx.Get(sizeBucket, cosignedKey)
	if err != nil || raw == nil {
		return nil, 0, time.Time{}, err
	}
	if len(raw) < 16 {
		return nil, 0, time.Time{}, errors.New("the cosigned checkpoint kept is malformed")
	}
	size = int64(binary.BigEndian.Uint64(raw))                       //nolint:gosec // written from a non-negative size
	at = time.Unix(int64(binary.BigEndian.Uint64(raw[8:])), 0).UTC() //nolint:gosec // written from a Unix time
	return raw[16:], size, at, nil
}

// KeepCosigned keeps signed, a checkpoint of size entries with the
// witnesses' cosignatures made at, unless a larger one is kept.
func KeepCosigned(tx Writer, signed []byte, size int64, at time.Time) error {
	_, kept, _, err := Cosigned(tx)
	if err != nil || kept > size {
		return err
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(size))   //nolint:gosec // a size is not negative
	v = binary.BigEndian.AppendUint64(v, uint64(at.Unix())) //nolint:gosec // a time after 1970
	return tx.Put(sizeBucket, cosignedKey, append(v, signed...))
}

// hashReader reads the stored hashes of a transaction.
type hashReader struct{ tx Reader }

func (r hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, idx := range indexes {
		b, err := r.tx.Get(hashBucket, indexKey(idx))
		if err != nil {
			return nil, err
		}
		if len(b) != tlog.HashSize {
			return nil, fmt.Errorf("the log's stored hash %d is missing", idx)
		}
		copy(out[i][:], b)
	}
	return out, nil
}
