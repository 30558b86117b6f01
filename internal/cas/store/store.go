// Package store owns CAS's state at rest: a Store of buckets of keys to
// values whose updates are atomic and durable when they return (bbolt on
// the CAS volume, fsync'd copy-on-write pages, so a crash leaves the last
// committed state), and Encrypted, which seals each value with AES-256-GCM
// under a seed-derived key, bound to its bucket and key, and keeps a
// digest of the whole state that unlock checks.
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/cloister-cc/cloister/internal/cas/store/records"
)

// Store is CAS's state: records.Store, which tools that move a state
// without a store use.
type Store = records.Store

// Tx is one transaction: records.Tx.
type Tx = records.Tx

// ErrConflict: see records.ErrConflict.
var ErrConflict = records.ErrConflict

// Bolt is the embedded file store.
type Bolt struct{ db *bolt.DB }

// OpenBolt opens (or creates) the state file in dir. A second process on
// the same file is refused rather than waited for.
func OpenBolt(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, "cas.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("state %s is locked: another CAS uses it", path)
	}
	if err != nil {
		return nil, fmt.Errorf("opening state %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

func (b *Bolt) View(fn func(Tx) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b *Bolt) Update(fn func(Tx) error) error {
	return b.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b *Bolt) Close() error { return b.db.Close() }

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Get(bucket, key string) ([]byte, error) {
	bk := t.tx.Bucket([]byte(bucket))
	if bk == nil {
		return nil, nil
	}
	v := bk.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	return append([]byte(nil), v...), nil // bbolt's memory is valid only inside the transaction
}

func (t boltTx) Put(bucket, key string, value []byte) error {
	bk, err := t.tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	return bk.Put([]byte(key), value)
}

func (t boltTx) Delete(bucket, key string) error {
	bk := t.tx.Bucket([]byte(bucket))
	if bk == nil {
		return nil
	}
	return bk.Delete([]byte(key))
}

func (t boltTx) ForEach(bucket string, fn func(string, []byte) error) error {
	bk := t.tx.Bucket([]byte(bucket))
	if bk == nil {
		return nil
	}
	return bk.ForEach(func(k, v []byte) error { return fn(string(k), append([]byte(nil), v...)) })
}

func (t boltTx) Buckets() ([]string, error) {
	var out []string
	err := t.tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		if k, _ := b.Cursor().First(); k != nil {
			out = append(out, string(name))
		}
		return nil
	})
	return out, err
}
