package vaultinit

import (
	"crypto/ecdsa"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/ownerseal"
	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// BundleVersion is the form of a recovery bundle this version writes.
const BundleVersion = "cloister.dev/vault-recovery/v1"

// MaxBundle bounds a recovery bundle (16 owners' sealed keys: a few KiB).
const MaxBundle = 64 << 10

// recoveryInfo binds a sealed recovery key to its use and its Vault.
func recoveryInfo(vault string) []byte {
	return []byte("cloister.dev/vault-recovery-key/v1 " + vault)
}

// Bundle is a Vault's recovery keys, each sealed to one owner: the only
// copy that leaves the Vault's TEE.
type Bundle struct {
	Version string `json:"version"`
	// Vault names it (NAMESPACE/NAME); the sealing binds each key to it.
	Vault string `json:"vault"`
	// Threshold of the keys rekey or a new root token need.
	Threshold int           `json:"threshold"`
	Shares    []SealedShare `json:"shares"`
}

// SealedShare is one owner's recovery key, sealed to the owner.
type SealedShare struct {
	// Owner is the owner key's fingerprint (sha256:HEX), as policies name
	// signers.
	Owner  string `json:"owner"`
	Sealed []byte `json:"sealed"`
}

// SealRecovery seals recovery key i to owner i (PEM public keys).
func SealRecovery(vault string, keys [][]byte, owners []string, threshold int) (*Bundle, error) {
	if len(keys) != len(owners) {
		return nil, fmt.Errorf("%d recovery keys for %d owners", len(keys), len(owners))
	}
	b := &Bundle{Version: BundleVersion, Vault: vault, Threshold: threshold}
	for i, pemKey := range owners {
		pub, err := keyfile.ParsePublic([]byte(pemKey))
		if err != nil {
			return nil, fmt.Errorf("owner %d: %w", i, err)
		}
		sealed, err := ownerseal.Seal(pub, recoveryInfo(vault), keys[i])
		if err != nil {
			return nil, fmt.Errorf("owner %d: %w", i, err)
		}
		b.Shares = append(b.Shares, SealedShare{Owner: policy.Fingerprint(pub), Sealed: sealed})
	}
	return b, nil
}

// ParseBundle reads a bundle strictly: bounded, unknown fields refused,
// every field checked.
func ParseBundle(data []byte) (*Bundle, error) {
	if len(data) > MaxBundle {
		return nil, fmt.Errorf("recovery bundle: %d bytes, more than %d", len(data), MaxBundle)
	}
	var b Bundle
	if err := strictjson.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("recovery bundle: %w", err)
	}
	switch {
	case b.Version != BundleVersion:
		return nil, fmt.Errorf("recovery bundle: version %q, want %q", b.Version, BundleVersion)
	case b.Vault == "":
		return nil, errors.New("recovery bundle: vault: empty")
	case len(b.Shares) == 0 || len(b.Shares) > 16:
		return nil, fmt.Errorf("recovery bundle: shares: %d, want 1 to 16", len(b.Shares))
	case b.Threshold < 1 || b.Threshold > len(b.Shares):
		return nil, fmt.Errorf("recovery bundle: threshold: %d of %d shares", b.Threshold, len(b.Shares))
	}
	for i, s := range b.Shares {
		if len(s.Owner) != len("sha256:")+64 || s.Owner[:7] != "sha256:" || len(s.Sealed) == 0 {
			return nil, fmt.Errorf("recovery bundle: shares[%d]: an owner fingerprint (sha256:HEX) and a sealed key", i)
		}
	}
	return &b, nil
}

// Open opens the share of owner (its private key) in b.
func (b *Bundle) Open(owner *ecdsa.PrivateKey) ([]byte, error) {
	fp := policy.Fingerprint(&owner.PublicKey)
	for _, s := range b.Shares {
		if s.Owner != fp {
			continue
		}
		key, err := ownerseal.Open(owner, recoveryInfo(b.Vault), s.Sealed)
		if err != nil {
			return nil, fmt.Errorf("the recovery key of %s does not open (tampered, or sealed for another Vault): %w", fp, err)
		}
		return key, nil
	}
	return nil, fmt.Errorf("no recovery key of owner %s in the bundle of Vault %s", fp, b.Vault)
}
