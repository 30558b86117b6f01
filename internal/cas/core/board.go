package core

import (
	"crypto/ecdsa"
	"encoding/json"
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// The board approves new policy names: the first version of a name needs
// the signature of one board key besides its owners', so nobody takes a
// name (and the certificate names it would hold) just by being first.
// Its keys are fixed at init (by default the recovery owners) and kept
// with the encrypted state, so whoever can write the store cannot swap
// them.
const boardRecord = "board" // in bucketCA

type boardKeys struct {
	Keys []string `json:"keys"` // PEM public keys
}

func marshalBoard(keys []*ecdsa.PublicKey) ([]byte, error) {
	b := boardKeys{}
	for _, k := range keys {
		b.Keys = append(b.Keys, string(policy.MarshalPublicKey(k)))
	}
	return json.Marshal(b)
}

func parseBoard(raw []byte) ([]*ecdsa.PublicKey, error) {
	var b boardKeys
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("the board: %w", err)
	}
	out := make([]*ecdsa.PublicKey, 0, len(b.Keys))
	for i, p := range b.Keys {
		k, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("the board's key %d: %w", i, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// Board names (fingerprints) the keys that approve new policy names; nil
// for a CAS initialised before boards, which takes new names without one.
func (c *CAS) Board() ([]string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range k.board {
		out = append(out, policy.Fingerprint(b))
	}
	return out, nil
}

// approveNew checks the board's approval of version 1 of a new name among
// the signers (fingerprints whose signatures verified).
func approveNew(board []*ecdsa.PublicKey, doc *policy.Document, signers map[string]bool) error {
	if board == nil {
		return nil // initialised before boards: said at unlock
	}
	for _, b := range board {
		if signers[policy.Fingerprint(b)] {
			return nil
		}
	}
	return fmt.Errorf("%w: policy %s is a new name, so its version 1 needs the signature of a board key of this CAS besides its owners' "+
		"(the board approves new names; its keys were given at cas init, by default the recovery owners): have a board member sign it (cloister policy sign --key BOARD.pem on the SignedPolicy)",
		ErrUnauthorized, doc.Name)
}
