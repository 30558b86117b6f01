package store

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/store/records"
)

// Encrypted seals values under key (32 bytes, AES-256-GCM), binding each
// to its bucket and key so a value moved to another key does not open.
// Keys (names) stay in the clear: they are ids and digests, never secrets.
// The plain buckets it is made with hold values CAS reads before it has
// the key; they are stored as given.
//
// It also keeps a digest of the whole state as stored (every bucket,
// sealed or plain) in an integrity record sealed under the same key, with
// a generation that counts the updates. Verify, at unlock, refuses a
// state that does not match it: one record older than the rest, records
// from two points in time, one removed or added. A whole state rolled back
// to an older consistent point does match: only a monotonic counter in
// hardware could tell, which docs/security.md says.
type Encrypted struct {
	aead  cipher.AEAD
	plain map[string]bool
}

// The integrity record, in a bucket of its own.
const (
	integrityBucket = records.IntegrityBucket
	integrityKey    = records.IntegrityKey
)

// NewEncrypted makes the sealing layer for one key.
func NewEncrypted(key []byte, plain ...string) (*Encrypted, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	e := &Encrypted{aead: aead, plain: map[string]bool{}}
	for _, b := range plain {
		e.plain[b] = true
	}
	return e, nil
}

var (
	// ErrTampered is a value that does not open: changed on disk, moved,
	// or sealed under another key.
	ErrTampered = errors.New("stored value does not open with the state key")
	// ErrIntegrity is a state that does not match its digest.
	ErrIntegrity = errors.New("the state does not match its digest: a record was changed, removed, added or replaced by an older copy since CAS wrote it")
	errReadOnly  = errors.New("write in a read-only transaction")
)

// View runs fn with a consistent read-only view of s.
func (e *Encrypted) View(s Store, fn func(Tx) error) error {
	return s.View(func(tx Tx) error { return fn(&encryptedTx{Tx: tx, e: e, readOnly: true}) })
}

// Update runs fn in one transaction of s, sealing what it writes, and
// moves the state's digest and generation on with it. at is the
// generation the caller decided on: if the state moved on since (another
// replica wrote it), nothing is written and the error is ErrConflict.
// It returns the state's generation after the transaction.
func (e *Encrypted) Update(s Store, at uint64, fn func(Tx) error) (uint64, error) {
	return e.update(s, at, 0, fn)
}

// Advance moves the state's generation from at to to (above it) in one
// transaction that changes no record: what the recovery owners' acceptance
// of an older state does, so that replicas which served a generation below
// to take it in. ErrConflict as for Update.
func (e *Encrypted) Advance(s Store, at, to uint64) (uint64, error) {
	if to <= at {
		return at, fmt.Errorf("advancing the state from generation %d to %d: not forward", at, to)
	}
	return e.update(s, at, to, func(Tx) error { return nil })
}

// update is Update, moving the generation to to when it is set, whether
// or not fn changed a record.
func (e *Encrypted) update(s Store, at, to uint64, fn func(Tx) error) (uint64, error) {
	var generation uint64
	err := s.Update(func(tx Tx) error {
		if at == 0 {
			// A first write on a state someone else began (under a key
			// of their own, which this one cannot open).
			if raw, err := tx.Get(integrityBucket, integrityKey); err != nil || raw != nil {
				return cmp.Or(err, fmt.Errorf("%w: the state was begun meanwhile", ErrConflict))
			}
		}
		st, err := e.integrity(tx)
		if err != nil {
			return err
		}
		if st.generation != at {
			return fmt.Errorf("%w: the state is at generation %d, this change was decided at %d", ErrConflict, st.generation, at)
		}
		generation = st.generation
		etx := &encryptedTx{Tx: tx, e: e}
		if err := fn(etx); err != nil {
			return err
		}
		switch {
		case to > 0:
			st.generation = to - 1
		case !etx.changed:
			return nil
		}
		st.generation++
		st.digest.add(&etx.delta)
		generation = st.generation
		return tx.Put(integrityBucket, integrityKey, e.seal(st.marshal(), integrityBucket, integrityKey))
	})
	if err != nil {
		return at, err
	}
	return generation, nil
}

// Verify checks the whole state against its digest and returns its
// generation (0 for an empty state).
func (e *Encrypted) Verify(s Store) (uint64, error) { return e.Load(s, nil) }

// Load checks the whole state against its digest and, in the same view,
// runs fn (unless nil) on it; it returns the state's generation.
func (e *Encrypted) Load(s Store, fn func(Tx) error) (generation uint64, err error) {
	err = s.View(func(tx Tx) error {
		if generation, err = e.verify(tx); err != nil || fn == nil {
			return err
		}
		return fn(&encryptedTx{Tx: tx, e: e, readOnly: true})
	})
	return generation, err
}

func (e *Encrypted) verify(tx Tx) (uint64, error) {
	raw, err := tx.Get(integrityBucket, integrityKey)
	if err != nil {
		return 0, err
	}
	var sum setHash
	records := 0
	buckets, err := tx.Buckets()
	if err != nil {
		return 0, err
	}
	for _, b := range buckets {
		if b == integrityBucket {
			continue
		}
		err := tx.ForEach(b, func(k string, v []byte) error {
			records++
			sum.add(element(b, k, v))
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	if raw == nil {
		if records > 0 {
			return 0, fmt.Errorf("%w: it has %d records and no digest (written before CAS kept one, or the digest was removed)", ErrIntegrity, records)
		}
		return 0, nil
	}
	want, err := e.integrity(tx)
	if err != nil {
		return 0, err
	}
	if sum != want.digest {
		return 0, fmt.Errorf("%w (%d records, generation %d)", ErrIntegrity, records, want.generation)
	}
	return want.generation, nil
}

// integrity reads the integrity record of tx; a state without one starts
// at generation 0 with the empty digest.
func (e *Encrypted) integrity(tx Tx) (*integrityRecord, error) {
	raw, err := tx.Get(integrityBucket, integrityKey)
	if raw == nil || err != nil {
		return &integrityRecord{}, err
	}
	plain, err := e.open(raw, integrityBucket, integrityKey)
	if err != nil {
		return nil, err
	}
	return parseIntegrity(plain)
}

type integrityRecord struct {
	generation uint64
	digest     setHash
}

func (r *integrityRecord) marshal() []byte {
	return append(binary.BigEndian.AppendUint64(nil, r.generation), r.digest[:]...)
}

func parseIntegrity(b []byte) (*integrityRecord, error) {
	if len(b) != 8+setHashSize {
		return nil, fmt.Errorf("%w: the digest record is %d bytes, want %d", ErrIntegrity, len(b), 8+setHashSize)
	}
	r := &integrityRecord{generation: binary.BigEndian.Uint64(b)}
	copy(r.digest[:], b[8:])
	return r, nil
}

func aad(bucket, key string) []byte { return []byte(bucket + "\x00" + key) }

func (e *Encrypted) seal(value []byte, bucket, key string) []byte {
	nonce := make([]byte, e.aead.NonceSize())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	return e.aead.Seal(nonce, nonce, value, aad(bucket, key))
}

func (e *Encrypted) open(v []byte, bucket, key string) ([]byte, error) {
	n := e.aead.NonceSize()
	if len(v) < n {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ErrTampered)
	}
	plain, err := e.aead.Open(nil, v[:n], v[n:], aad(bucket, key))
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ErrTampered)
	}
	return plain, nil
}

// encryptedTx seals and opens the values of one transaction and, in an
// update, sums what its writes change in the digest.
type encryptedTx struct {
	Tx
	e        *Encrypted
	readOnly bool
	changed  bool
	delta    setHash
}

func (t *encryptedTx) Get(bucket, key string) ([]byte, error) {
	v, err := t.Tx.Get(bucket, key)
	if v == nil || err != nil || t.e.plain[bucket] {
		return v, err
	}
	return t.e.open(v, bucket, key)
}

func (t *encryptedTx) Put(bucket, key string, value []byte) error {
	if t.readOnly {
		return errReadOnly
	}
	stored := value
	if !t.e.plain[bucket] {
		stored = t.e.seal(value, bucket, key)
	}
	if err := t.forget(bucket, key); err != nil {
		return err
	}
	if err := t.Tx.Put(bucket, key, stored); err != nil {
		return err
	}
	t.delta.add(element(bucket, key, stored))
	return nil
}

func (t *encryptedTx) Delete(bucket, key string) error {
	if t.readOnly {
		return errReadOnly
	}
	if err := t.forget(bucket, key); err != nil {
		return err
	}
	return t.Tx.Delete(bucket, key)
}

// forget takes the stored value of bucket/key out of the digest.
func (t *encryptedTx) forget(bucket, key string) error {
	old, err := t.Tx.Get(bucket, key)
	if err != nil {
		return err
	}
	t.changed = true
	if old != nil {
		t.delta.sub(element(bucket, key, old))
	}
	return nil
}

func (t *encryptedTx) ForEach(bucket string, fn func(string, []byte) error) error {
	return t.Tx.ForEach(bucket, func(k string, v []byte) error {
		if t.e.plain[bucket] {
			return fn(k, v)
		}
		plain, err := t.e.open(v, bucket, k)
		if err != nil {
			return err
		}
		return fn(k, plain)
	})
}
