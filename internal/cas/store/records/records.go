// Package records owns what CAS's state is made of, as stored, apart from
// any store: the Store and Tx interfaces every store implements, the
// conflict of two writers, and the name of the integrity record. Tools
// that move a state without opening it (backup, restore) build on it
// without linking a store.
package records

import "errors"

// ErrConflict is a transaction that lost to another writer of the same
// state (another replica of CAS): nothing of it was stored; decide again
// on the state as it now is.
var ErrConflict = errors.New("the state changed meanwhile")

// Store is CAS's state.
type Store interface {
	// View runs fn with a consistent read-only view.
	View(fn func(Tx) error) error
	// Update runs fn in one atomic, durable transaction; an error from fn
	// rolls everything back.
	Update(fn func(Tx) error) error
	Close() error
}

// Tx reads and writes one transaction's buckets.
type Tx interface {
	// Get returns the value, or nil when there is none.
	Get(bucket, key string) ([]byte, error)
	Put(bucket, key string, value []byte) error
	Delete(bucket, key string) error
	// ForEach visits the bucket's keys in order.
	ForEach(bucket string, fn func(key string, value []byte) error) error
	// Buckets names the buckets that hold records, in order.
	Buckets() ([]string, error)
}

// The integrity record (the state's sealed digest and generation), in a
// bucket of its own.
const (
	IntegrityBucket = "integrity"
	IntegrityKey    = "state"
)

// IsIntegrity says whether bucket/key names the integrity record.
func IsIntegrity(bucket, key string) bool { return bucket == IntegrityBucket && key == IntegrityKey }
