package core

import (
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"slices"

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

// nameApprovers are the keys that may approve a new name besides its
// owners: the board's, and for NAMESPACE/NAME the current owners of the
// policy NAMESPACE, which holds that namespace.
func (c *CAS) nameApprovers(k *keys, doc *policy.Document) (approvers []*ecdsa.PublicKey, parent *policy.Document) {
	approvers = slices.Clip(k.board)
	if ns := policy.Namespace(doc.Name); ns != "" {
		c.mu.RLock()
		r := k.policies[ns]
		c.mu.RUnlock()
		if r != nil && r.doc != nil && !r.doc.Immutable() {
			parent = r.doc
			keys, _ := parent.OwnerKeys() // validated when registered
			approvers = append(approvers, keys...)
		}
	}
	return approvers, parent
}

// approveNew checks the approval of version 1 of a new name among the
// signers (fingerprints whose signatures verified): one board key, or the
// threshold of the owners of the namespace the name is in (parent).
func approveNew(board []*ecdsa.PublicKey, parent *policy.Document, doc *policy.Document, signers map[string]bool) error {
	for _, b := range board {
		if signers[policy.Fingerprint(b)] {
			return nil
		}
	}
	if parent != nil {
		keys, _ := parent.OwnerKeys()
		n := 0
		for _, o := range keys {
			if signers[policy.Fingerprint(o)] {
				n++
			}
		}
		if need := parent.OwnerThreshold(); n < need {
			return fmt.Errorf("%w: policy %s is a new name in namespace %s, so its version 1 needs the signatures of %d of the owners of policy %s (it has %d), or of a board key, besides its own owners': "+
				"have them sign it (cloister policy sign --key OWNER.pem on the SignedPolicy)", ErrUnauthorized, doc.Name, parent.Name, need, parent.Name, n)
		}
		return nil
	}
	if board == nil {
		return nil // initialised before boards: said at unlock
	}
	where := ""
	if ns := policy.Namespace(doc.Name); ns != "" {
		where = fmt.Sprintf(", or the owners of policy %s once the board has approved that namespace", ns)
	}
	return fmt.Errorf("%w: policy %s is a new name, so its version 1 needs the signature of a board key of this CAS besides its owners' "+
		"(the board approves new names%s; its keys were given at cas init, by default the recovery owners): have a board member sign it (cloister policy sign --key BOARD.pem on the SignedPolicy)",
		ErrUnauthorized, doc.Name, where)
}
