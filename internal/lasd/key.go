package lasd

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

// LoadOrCreateKey reads the node's simulation key from path, or makes one
// there (0600) when it does not exist, so evidence keeps its signer across
// restarts. An empty path makes a key for this process only.
func LoadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	if path != "" {
		data, err := os.ReadFile(path)
		if err == nil {
			block, _ := pem.Decode(data)
			if block == nil {
				return nil, fmt.Errorf("--key-file %s: not PEM", path)
			}
			k, err := x509.ParseECPrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("--key-file %s: %w", path, err)
			}
			return k, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--key-file: %w", err)
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
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	return k, nil
}
