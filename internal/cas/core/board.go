package core

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
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
	// Version counts changes: a change is signed for the next one.
	Version int `json:"version,omitempty"`
}

// boardState is the current board.
type boardState struct {
	keys    []*ecdsa.PublicKey
	version int
}

func marshalBoard(b boardState) ([]byte, error) {
	if len(b.keys) == 0 || len(b.keys) > wire.MaxBoard {
		return nil, fmt.Errorf("%d keys, want 1..%d", len(b.keys), wire.MaxBoard)
	}
	out := boardKeys{Version: b.version}
	seen := map[string]bool{}
	for i, k := range b.keys {
		fp := policy.Fingerprint(k)
		if seen[fp] {
			return nil, fmt.Errorf("keys[%d]: the same key as an earlier one", i)
		}
		seen[fp] = true
		out.Keys = append(out.Keys, string(policy.MarshalPublicKey(k)))
	}
	return json.Marshal(out)
}

func parseBoard(raw []byte) (boardState, error) {
	var b boardKeys
	if err := json.Unmarshal(raw, &b); err != nil {
		return boardState{}, fmt.Errorf("the board: %w", err)
	}
	out := boardState{version: b.Version}
	for i, p := range b.Keys {
		k, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return boardState{}, fmt.Errorf("the board's key %d: %w", i, err)
		}
		out.keys = append(out.keys, k)
	}
	return out, nil
}

// Board names (fingerprints) the keys that approve new policy names, and
// counts the board's changes; nil for a CAS initialised before boards,
// which takes new names without one.
func (c *CAS) Board() ([]string, int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, 0, err
	}
	var out []string
	for _, b := range k.board.keys {
		out = append(out, policy.Fingerprint(b))
	}
	return out, k.board.version, nil
}

// ChangeBoard replaces the board by the keys a majority of the current
// board signed for its next version (wire.BoardDigest). A CAS initialised
// before boards has none to sign a change.
func (c *CAS) ChangeBoard(req *wire.BoardChange) ([]string, error) {
	c.regMu.Lock() // no registration is approved by a board half changed
	defer c.regMu.Unlock()
	if err := c.sync(); err != nil {
		return nil, err
	}
	c.mu.RLock()
	k, err := c.ready()
	var board boardState
	var at uint64
	if err == nil {
		board, at = k.board, k.generation
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	refuse := func(err error) ([]string, error) {
		c.cfg.Log.Warn("audit: board change refused", "version", req.Version, "reason", err.Error())
		return nil, err
	}
	next, raw, err := checkBoardChange(board, policy.EncodePublicKey(k.encryption.PublicKey()), req)
	if err != nil {
		return refuse(err)
	}
	gen, err := k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error { return etx.Put(bucketCA, boardRecord, raw) })
	if errors.Is(err, store.ErrConflict) {
		return refuse(fmt.Errorf("%w: another replica of CAS changed its state while this change was checked: send it again (%w)", ErrConflict, err))
	}
	if err != nil {
		return nil, fmt.Errorf("storing the board: %w", err)
	}
	c.mu.Lock()
	if cur := c.keys; cur != nil && cur.generation < gen {
		cur.board, cur.generation = next, gen
	}
	c.mu.Unlock()
	fps := make([]string, len(next.keys))
	for i, key := range next.keys {
		fps[i] = policy.Fingerprint(key)
	}
	c.cfg.Log.Info("audit: board changed", "version", next.version, "board", fps, "signers", len(req.Signatures))
	return fps, nil
}

// checkBoardChange is the board req makes of current, for the CAS whose
// encryption key is casKey, and its stored form; or why not.
func checkBoardChange(current boardState, casKey string, req *wire.BoardChange) (boardState, []byte, error) {
	if current.keys == nil {
		return boardState{}, nil, fmt.Errorf("%w: this CAS was initialised before boards, so no board can approve a change: it takes new names without one", ErrConflict)
	}
	if want := current.version + 1; req.Version != want {
		return boardState{}, nil, fmt.Errorf("%w: version: %d, but the board is at version %d: sign the change as version %d", ErrConflict, req.Version, current.version, want)
	}
	next := boardState{version: req.Version}
	fps := make([]string, 0, len(req.Keys))
	for i, p := range req.Keys {
		key, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return boardState{}, nil, fmt.Errorf("%w: keys[%d]: %w", ErrInvalid, i, err)
		}
		next.keys = append(next.keys, key)
		fps = append(fps, policy.Fingerprint(key))
	}
	raw, err := marshalBoard(next)
	if err != nil {
		return boardState{}, nil, fmt.Errorf("%w: keys: %w", ErrInvalid, err)
	}
	digest := wire.BoardDigest(casKey, req.Version, fps)
	members := map[string]*ecdsa.PublicKey{}
	for _, b := range current.keys {
		members[policy.Fingerprint(b)] = b
	}
	signed := map[string]bool{}
	for i, sig := range req.Signatures {
		key := members[sig.Signer]
		if key == nil {
			return boardState{}, nil, fmt.Errorf("%w: signatures[%d]: %s is not a key of the board: only its members sign a change", ErrUnauthorized, i, sig.Signer)
		}
		der, err := base64.StdEncoding.DecodeString(sig.Signature)
		if err != nil || signed[sig.Signer] || !ecdsa.VerifyASN1(key, digest, der) {
			return boardState{}, nil, fmt.Errorf("%w: signatures[%d]: the signature of %s does not verify over this change as version %d of this CAS's board (or signs twice): sign it again (cloister cas board)",
				ErrUnauthorized, i, sig.Signer, req.Version)
		}
		signed[sig.Signer] = true
	}
	if need := len(current.keys)/2 + 1; len(signed) < need {
		return boardState{}, nil, fmt.Errorf("%w: the change is signed by %d of the board's %d keys, %d (a majority) needed", ErrUnauthorized, len(signed), len(current.keys), need)
	}
	return next, raw, nil
}

// nameApprovers are the keys that may approve a new name besides its
// owners: the board's, and for NAMESPACE/NAME the current owners of the
// policy NAMESPACE, which holds that namespace.
func (c *CAS) nameApprovers(k *keys, doc *policy.Document) (approvers []*ecdsa.PublicKey, parent *policy.Document) {
	approvers = slices.Clip(k.board.keys)
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
	if countSigned(board, signers) > 0 {
		return nil
	}
	if parent != nil {
		keys, _ := parent.OwnerKeys()
		n := countSigned(keys, signers)
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
