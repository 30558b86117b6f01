// Package memo remembers what a verifier has checked once, keyed by the
// SHA-256 of the exact bytes it checked: a certificate chain that chains
// to a root, collateral whose signatures verify. A verifier that finds its
// key here skips the signatures, never the checks that depend on the time
// or on the evidence itself, so a quote costs its own signatures.
//
// Only what verified is put here, so an attacker cannot fill it with
// chains of its own; it is bounded all the same.
package memo

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// Key is the SHA-256 of the parts a result depends on.
type Key [sha256.Size]byte

// KeyOf hashes parts, each prefixed with its length, so no two lists of
// parts share a key.
func KeyOf(parts ...[]byte) Key {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// Map is a bounded, concurrency-safe map of verified results: when full,
// putting drops an arbitrary entry, which only costs its verification
// again.
type Map[V any] struct {
	mu   sync.RWMutex
	m    map[Key]V
	max  int
	last atomic.Pointer[last[V]]
}

// New returns a Map holding at most max entries.
func New[V any](maxEntries int) *Map[V] {
	return &Map[V]{m: make(map[Key]V), max: maxEntries}
}

// Get returns the value put under k.
func (m *Map[V]) Get(k Key) (V, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.m[k]
	return v, ok
}

// Put remembers v under k.
func (m *Map[V]) Put(k Key, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[k]; !ok && len(m.m) >= m.max {
		for old := range m.m {
			delete(m.m, old)
			break
		}
	}
	m.m[k] = v
}

// Len is the number of entries.
func (m *Map[V]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.m)
}

// Find returns the value kept under exactly these parts: the last one
// kept is found by comparing their bytes, which costs a memory comparison
// where the map's key costs a SHA-256 of them (one platform sends the same
// chain and collateral with quote after quote); the others by that key.
func (m *Map[V]) Find(parts ...[]byte) (V, bool) {
	if e := m.last.Load(); e != nil && e.is(parts) {
		return e.v, true
	}
	v, ok := m.Get(KeyOf(parts...))
	if ok {
		m.last.Store(newLast(v, parts))
	}
	return v, ok
}

// Keep puts v under the key of parts, and as the last value kept.
func (m *Map[V]) Keep(v V, parts ...[]byte) {
	m.Put(KeyOf(parts...), v)
	m.last.Store(newLast(v, parts))
}

// last is a value with copies of the exact parts it was kept under.
type last[V any] struct {
	parts [][]byte
	v     V
}

func newLast[V any](v V, parts [][]byte) *last[V] {
	e := &last[V]{v: v, parts: make([][]byte, len(parts))}
	for i, p := range parts {
		e.parts[i] = bytes.Clone(p)
	}
	return e
}

func (e *last[V]) is(parts [][]byte) bool {
	if len(e.parts) != len(parts) {
		return false
	}
	for i := range parts {
		if !bytes.Equal(e.parts[i], parts[i]) {
			return false
		}
	}
	return true
}
