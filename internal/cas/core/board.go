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
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The board approves new policy names: the first version of a name needs
// the signatures of the board's threshold of its keys besides its owners',
// so nobody takes a name (and the certificate names it would hold) just by
// being first, nor by holding one member's key. Its keys and threshold are
// fixed at init (by default the recovery owners, a majority of them) and
// kept with the encrypted state, so whoever can write the store cannot
// swap them; a state without a board does not open.
const boardRecord = "board" // in bucketCA

type boardKeys struct {
	Keys []string `json:"keys"` // PEM public keys
	// Version counts changes: a change is signed for the next one.
	Version int `json:"version,omitempty"`
	// Threshold is how many of the keys approve a new name or a
	// wildcard; 0 in a board stored before thresholds: a majority.
	Threshold int `json:"threshold,omitempty"`
}

// boardState is the current board.
type boardState struct {
	keys      []*ecdsa.PublicKey
	version   int
	threshold int
}

// majority of n keys.
func majority(n int) int { return wire.BoardThreshold(0, n) }

// approvals is how many of the board's keys approve a name or a wildcard.
func (b boardState) approvals() int {
	if b.threshold > 0 {
		return b.threshold
	}
	return majority(len(b.keys))
}

// approvedBy says whether the board's threshold is among the signers.
func (b boardState) approvedBy(signers map[string]bool) bool {
	return len(b.keys) > 0 && countSigned(b.keys, signers) >= b.approvals()
}

func marshalBoard(b boardState) ([]byte, error) {
	if len(b.keys) == 0 || len(b.keys) > wire.MaxBoard {
		return nil, fmt.Errorf("%d keys, want 1..%d", len(b.keys), wire.MaxBoard)
	}
	if b.threshold < 1 || b.threshold > len(b.keys) {
		return nil, fmt.Errorf("threshold %d, want 1..%d (the board's keys)", b.threshold, len(b.keys))
	}
	out := boardKeys{Version: b.version, Threshold: b.threshold}
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
	out := boardState{version: b.Version, threshold: b.Threshold}
	if b.Threshold < 0 || b.Threshold > len(b.Keys) {
		return boardState{}, fmt.Errorf("the board: threshold %d of %d keys", b.Threshold, len(b.Keys))
	}
	for i, p := range b.Keys {
		k, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return boardState{}, fmt.Errorf("the board's key %d: %w", i, err)
		}
		out.keys = append(out.keys, k)
	}
	return out, nil
}

// BoardInfo is the board as CAS shows it: its keys' fingerprints, how
// many of them approve a name, and its version (its changes).
type BoardInfo struct {
	Keys      []string
	Threshold int
	Version   int
}

// Board is the board that approves new policy names.
func (c *CAS) Board() (BoardInfo, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return BoardInfo{}, err
	}
	return k.board.info(), nil
}

func (b boardState) info() BoardInfo {
	out := BoardInfo{Threshold: b.approvals(), Version: b.version}
	for _, key := range b.keys {
		out.Keys = append(out.Keys, policy.Fingerprint(key))
	}
	return out
}

// ChangeBoard replaces the board by the keys and threshold that the
// current board signed for its next version (wire.BoardDigest): its
// threshold of them, and never fewer than a majority.
func (c *CAS) ChangeBoard(req *wire.BoardChange) (BoardInfo, error) {
	c.regMu.Lock() // no registration is approved by a board half changed
	defer c.regMu.Unlock()
	if err := c.sync(); err != nil {
		return BoardInfo{}, err
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
		return BoardInfo{}, err
	}
	refuse := func(err error) (BoardInfo, error) {
		c.cfg.Log.Warn("audit: board change refused", "version", req.Version, "reason", err.Error())
		return BoardInfo{}, err
	}
	next, raw, err := checkBoardChange(board, policy.EncodePublicKey(k.encryption.PublicKey()), req)
	if err != nil {
		return refuse(err)
	}
	gen, err := k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error {
		if err := etx.Put(bucketCA, boardRecord, raw); err != nil {
			return err
		}
		return appendLog(etx, tlog.Entry{Type: tlog.Board, Version: next.version, Digest: tlog.Digest(raw)})
	})
	if errors.Is(err, store.ErrConflict) {
		return refuse(fmt.Errorf("%w: another replica of CAS changed its state while this change was checked: send it again (%w)", ErrConflict, err))
	}
	if err != nil {
		return BoardInfo{}, fmt.Errorf("storing the board: %w", err)
	}
	c.mu.Lock()
	if cur := c.keys; cur != nil && cur.generation < gen {
		cur.board, cur.generation = next, gen
		c.raiseMark(cur, gen)
	}
	c.mu.Unlock()
	info := next.info()
	c.cfg.Log.Info("audit: board changed", "version", next.version, "board", info.Keys, "threshold", info.Threshold, "signers", len(req.Signatures))
	return info, nil
}

// checkBoardChange is the board req makes of current, for the CAS whose
// encryption key is casKey, and its stored form; or why not.
func checkBoardChange(current boardState, casKey string, req *wire.BoardChange) (boardState, []byte, error) {
	if want := current.version + 1; req.Version != want {
		return boardState{}, nil, fmt.Errorf("%w: version: %d, but the board is at version %d: sign the change as version %d", ErrConflict, req.Version, current.version, want)
	}
	next := boardState{version: req.Version, threshold: wire.BoardThreshold(req.Threshold, len(req.Keys))}
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
	digest := wire.BoardDigest(casKey, req.Version, next.threshold, fps)
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
	// A change is more than an approval: never fewer than a majority.
	if need := max(current.approvals(), majority(len(current.keys))); len(signed) < need {
		return boardState{}, nil, fmt.Errorf("%w: the change is signed by %d of the board's %d keys, %d (its threshold, and at least a majority) needed", ErrUnauthorized, len(signed), len(current.keys), need)
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
// signers (fingerprints whose signatures verified): the board's threshold
// of its keys, or the threshold of the owners of the namespace the name is
// in (parent).
func approveNew(board boardState, parent *policy.Document, doc *policy.Document, signers map[string]bool) error {
	if board.approvedBy(signers) {
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
	where := ""
	if ns := policy.Namespace(doc.Name); ns != "" {
		where = fmt.Sprintf(", or the owners of policy %s once the board has approved that namespace", ns)
	}
	return fmt.Errorf("%w: policy %s is a new name, so its version 1 needs the signatures of %d of the %d board keys of this CAS besides its owners' (it has %d) "+
		"(the board approves new names%s; its keys and threshold were given at cas init, by default the recovery owners and a majority): have board members sign it (cloister policy sign --key BOARD.pem on the SignedPolicy)",
		ErrUnauthorized, doc.Name, board.approvals(), len(board.keys), countSigned(board.keys, signers), where)
}
