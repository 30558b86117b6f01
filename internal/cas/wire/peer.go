package wire

import (
	"crypto/ecdsa"
	"crypto/hpke"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
)

// PeerSeedRequest is a replica of CAS asking a ready peer for the root
// seed (POST /v1/peer/seed): its evidence, whose report data binds Key,
// a P-256 public key (PKIX, PEM) made for this request only.
type PeerSeedRequest struct {
	Evidence attest.Evidence `json:"evidence"`
	Key      string          `json:"key"`
}

// PeerSeedResponse is the seed sealed to the request's key.
type PeerSeedResponse struct {
	Sealed []byte `json:"sealed"`
}

// peerSeedInfo binds a sealed seed to its use.
var peerSeedInfo = []byte("cloister.dev/peer-seed/v1")

// SealSeed seals the root seed to a requesting peer's key.
func SealSeed(key *ecdsa.PublicKey, seed []byte) ([]byte, error) {
	pub, err := key.ECDH()
	if err != nil {
		return nil, fmt.Errorf("key: it cannot be sealed to: %w", err)
	}
	pk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("key: it cannot be sealed to: %w", err)
	}
	return hpke.Seal(pk, resultKDF, resultAEAD, peerSeedInfo, seed)
}

// OpenSeed opens what SealSeed sealed to key.
func OpenSeed(key *ecdsa.PrivateKey, sealed []byte) ([]byte, error) {
	priv, err := key.ECDH()
	if err != nil {
		return nil, err
	}
	sk, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return nil, err
	}
	seed, err := hpke.Open(sk, resultKDF, resultAEAD, peerSeedInfo, sealed)
	if err != nil {
		return nil, fmt.Errorf("opening the seed a peer sealed to this replica's key: %w", err)
	}
	return seed, nil
}
