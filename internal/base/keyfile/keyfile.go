// Package keyfile owns ECDSA P-256 keys in PEM: a process's own key kept
// in a file, made when missing, so it survives restarts (LAS's simulation
// key, CAS's TLS key), and the parsing of the private and public keys
// people hand to Cloister (policy owner keys, image signing keys).
package keyfile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// LoadOrCreate reads an ECDSA P-256 key from path, or makes one there
// (0600) when it does not exist, so the key survives restarts (LAS's
// simulation key, CAS's TLS key); errors name the path, callers the flag.
// An empty path makes a key for this process only.
func LoadOrCreate(path string) (*ecdsa.PrivateKey, error) {
	if path != "" {
		data, err := os.ReadFile(path)
		if err == nil {
			k, err := ParsePrivate(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return k, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("reading key: %w", err)
		}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return k, nil
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("keeping the new key: %w", err)
	}
	return k, nil
}
