package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// Encrypted seals values under key (32 bytes, AES-256-GCM), binding each
// to its bucket and key so a value moved to another key does not open.
// Keys (names) stay in the clear: they are ids and digests, never secrets.
type Encrypted struct{ aead cipher.AEAD }

// NewEncrypted makes the sealing layer for one key.
func NewEncrypted(key []byte) (*Encrypted, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Encrypted{aead: aead}, nil
}

// ErrTampered is a value that does not open: changed on disk, moved, or
// sealed under another key.
var ErrTampered = errors.New("stored value does not open with the state key")

// Tx wraps a transaction so its values are sealed and opened.
func (e *Encrypted) Tx(tx Tx) Tx { return encryptedTx{tx, e.aead} }

type encryptedTx struct {
	Tx
	aead cipher.AEAD
}

func aad(bucket, key string) []byte { return []byte(bucket + "\x00" + key) }

func (t encryptedTx) Get(bucket, key string) ([]byte, error) {
	v, err := t.Tx.Get(bucket, key)
	if v == nil || err != nil {
		return nil, err
	}
	return t.open(bucket, key, v)
}

func (t encryptedTx) open(bucket, key string, v []byte) ([]byte, error) {
	n := t.aead.NonceSize()
	if len(v) < n {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ErrTampered)
	}
	plain, err := t.aead.Open(nil, v[:n], v[n:], aad(bucket, key))
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ErrTampered)
	}
	return plain, nil
}

func (t encryptedTx) Put(bucket, key string, value []byte) error {
	nonce := make([]byte, t.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	return t.Tx.Put(bucket, key, t.aead.Seal(nonce, nonce, value, aad(bucket, key)))
}

func (t encryptedTx) ForEach(bucket string, fn func(string, []byte) error) error {
	return t.Tx.ForEach(bucket, func(k string, v []byte) error {
		plain, err := t.open(bucket, k, v)
		if err != nil {
			return err
		}
		return fn(k, plain)
	})
}
