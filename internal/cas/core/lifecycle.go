package core

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// InitRequest is what an init gives CAS.
type InitRequest struct {
	// Owners get one share each; Threshold of them recover the seed.
	Owners    []*ecdsa.PublicKey
	Threshold int
	// Token is the init token CAS was started with.
	Token string
	// Board approves new policy names (default: Owners), BoardThreshold
	// of its keys at a time (default: a majority).
	Board          []*ecdsa.PublicKey
	BoardThreshold int
}

// Init is InitWith for owners, threshold, token and board, whose
// threshold is a majority.
func (c *CAS) Init(owners []*ecdsa.PublicKey, threshold int, token string, board ...*ecdsa.PublicKey) (*wire.Shares, error) {
	return c.InitWith(InitRequest{Owners: owners, Threshold: threshold, Token: token, Board: board})
}

// InitWith makes the seed, splits it among the recovery owners (threshold
// of them recover it), and makes the CAs. Once only, and only with the
// init token.
func (c *CAS) InitWith(req InitRequest) (*wire.Shares, error) {
	owners, threshold, token, board := req.Owners, req.Threshold, req.Token, req.Board
	// The registration lock orders every change to the state; mu is not
	// held while the state is written, since a shared store takes in
	// other replicas' changes (refresh, which takes mu) as it writes.
	c.regMu.Lock()
	defer c.regMu.Unlock()
	if err := c.sync(); err != nil {
		return nil, err
	}
	c.mu.RLock()
	state := c.state
	c.mu.RUnlock()
	if state != wire.Uninitialized {
		return nil, ErrInitialized
	}
	if err := c.checkInitToken(token); err != nil {
		c.cfg.Log.Warn("audit: init refused", "reason", err.Error())
		return nil, err
	}
	if len(owners) == 0 {
		return nil, fmt.Errorf("%w: recoveryOwners: give at least one owner key", ErrInvalid)
	}
	seen := map[string]bool{}
	var fps []string
	for i, o := range owners {
		fp := policy.Fingerprint(o)
		if seen[fp] {
			return nil, fmt.Errorf("%w: recoveryOwners[%d]: the same key as an earlier one", ErrInvalid, i)
		}
		seen[fp] = true
		fps = append(fps, fp)
	}
	if len(board) == 0 {
		board = owners
	}
	boardRaw, err := marshalBoard(boardState{keys: board, threshold: wire.BoardThreshold(req.BoardThreshold, len(board))})
	if err != nil {
		return nil, fmt.Errorf("%w: board (by default the recovery owners, a majority of them): %w: give the board's keys and threshold (cloister cas init --board, --board-threshold)", ErrInvalid, err)
	}
	s := seed.New()
	shares, commitment, err := s.Split(threshold, len(owners))
	if err != nil {
		return nil, fmt.Errorf("%w: threshold: %w", ErrInvalid, err)
	}
	out := &wire.Shares{Threshold: threshold}
	for i, sh := range shares {
		sealed, err := seed.SealShare(sh, owners[i]) //nolint:gosec // Split returns one share per owner
		if err != nil {
			return nil, fmt.Errorf("%w: recoveryOwners[%d]: %w", ErrInvalid, i, err)
		}
		out.Shares = append(out.Shares, wire.SealedShare{Owner: fps[i], Sealed: sealed})
	}
	authority, err := pki.New(s, c.cfg.Name, c.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	m := &meta{Commitment: commitment, Owners: fps, Check: s.Key("check", 32), Initialized: c.cfg.Clock.Now().UTC()}
	enc, err := store.NewEncrypted(s.Key("store", 32), bucketMeta, bucketSealed)
	if err != nil {
		return nil, err
	}
	slot, inState := c.cfg.Sealer.(SlotSealer)
	var sealed []byte
	if inState {
		if sealed, err = slot.wrap(s.Bytes()); err != nil {
			return nil, fmt.Errorf("sealing the seed: %w", err)
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	// The seal first: a crash after it but before the state commits
	// leaves an uninitialised CAS with a stale seal, which the next init
	// overwrites; the other order could leave a state nobody can unseal.
	if err := c.cfg.Sealer.Seal(s.Bytes()); err != nil {
		return nil, fmt.Errorf("sealing the seed: %w", err)
	}
	_, err = enc.Update(c.cfg.Store, 0, func(etx store.Tx) error {
		if err := etx.Put(bucketMeta, "seed", raw); err != nil {
			return err
		}
		if inState {
			if err := etx.Put(bucketSealed, slot.Node, sealed); err != nil {
				return err
			}
		}
		if err := etx.Put(bucketCA, boardRecord, boardRaw); err != nil {
			return err
		}
		return etx.Put(bucketCA, "certificates", authority.Marshal())
	})
	if errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("%w: by another replica, just now", ErrInitialized)
	}
	if err != nil {
		return nil, fmt.Errorf("storing the new state: %w", err)
	}
	c.mu.Lock()
	c.meta = m
	err = c.unlock(s)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out.RootCA = string(pemCert(authority.Root.Cert.Raw))
	c.cfg.InitToken.Consumed()
	c.cfg.Log.Info("audit: CAS initialised", "recoveryOwners", fps, "threshold", threshold, "insecureSealer", c.cfg.Sealer.Insecure())
	return out, nil
}

// checkInitToken compares token with the configured one in constant time.
func (c *CAS) checkInitToken(token string) error {
	if c.cfg.InitToken == nil {
		return fmt.Errorf("%w: this CAS was started without an init token, so it cannot be initialised", ErrUnauthorized)
	}
	want, err := c.cfg.InitToken.Token()
	if err != nil {
		return fmt.Errorf("%w: init token: %w", ErrUnauthorized, err)
	}
	if token == "" {
		return fmt.Errorf("%w: token: missing: give the init token CAS was started with (cloister cas init --init-token-file; --cluster reads it from the CAS resource's Secret)", ErrUnauthorized)
	}
	got, exp := sha256.Sum256([]byte(token)), sha256.Sum256(bytes.TrimSpace(want))
	if subtle.ConstantTimeCompare(got[:], exp[:]) != 1 {
		return fmt.Errorf("%w: token: not this CAS's init token", ErrUnauthorized)
	}
	return nil
}

// Recover takes one owner's share in recovery mode; with enough of them
// the seed is rebuilt and CAS is ready again. It returns how many more
// shares are needed.
func (c *CAS) Recover(sh seed.Share) (int, error) {
	need, s, err := c.recover(sh)
	if err != nil || need > 0 {
		return need, err
	}
	if err := c.seal(s); err != nil {
		c.cfg.Log.Warn("sealing the recovered seed failed: the next restart needs the owners again", "error", err.Error())
	}
	return 0, nil
}

// recover takes a share under the state lock and, with enough of them,
// unlocks CAS with the seed they make.
func (c *CAS) recover(sh seed.Share) (int, seed.Seed, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != wire.RecoveryMode {
		if c.state == wire.Uninitialized {
			return 0, seed.Seed{}, ErrNotInitialized
		}
		return 0, seed.Seed{}, fmt.Errorf("%w: CAS is not in recovery mode", ErrInvalid)
	}
	if err := c.meta.Commitment.Verify(sh); err != nil {
		c.cfg.Log.Warn("audit: recovery share refused", "share", sh.ID, "reason", err.Error())
		return 0, seed.Seed{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c.shares[sh.ID] = sh
	need := c.meta.Commitment.Threshold() - len(c.shares)
	c.cfg.Log.Info("audit: recovery share accepted", "share", sh.ID, "needed", max(need, 0))
	if need > 0 {
		return need, seed.Seed{}, nil
	}
	var all []seed.Share
	for _, s := range c.shares {
		all = append(all, s)
	}
	s, err := c.meta.Commitment.Combine(all)
	if err != nil {
		return 0, seed.Seed{}, err
	}
	if err := c.unlock(s); err != nil {
		return 0, seed.Seed{}, err
	}
	c.shares = map[uint64]seed.Share{}
	return 0, s, nil
}

// unlock derives the keys from the seed and loads the state they open.
func (c *CAS) unlock(s seed.Seed) error {
	if !bytes.Equal(s.Key("check", 32), c.meta.Check) {
		return errors.New("the seed is not this CAS's")
	}
	enc, err := store.NewEncrypted(s.Key("store", 32), bucketMeta, bucketSealed)
	if err != nil {
		return err
	}
	k := &keys{seed: s, enc: enc, history: pki.DeriveKey(s, "history"), challenge: s.Key("read-challenge", 32)}
	if k.encryption, err = policy.NewEncryptionKey(s.Key("policy-encryption", 32)); err != nil {
		return err
	}
	if err := c.load(k, &s); err != nil {
		return err
	}
	c.keys = k
	c.setState(wire.Ready, fmt.Sprintf("unlocked: %d policies, state generation %d", len(k.policies), k.generation))
	c.cfg.Metrics.policies.Set(float64(len(k.policies)))
	return nil
}

// load reads into k, at one generation whose digest it checks, what can
// change in the state: the board and the policies; and, given the seed,
// the CAs.
func (c *CAS) load(k *keys, s *seed.Seed) error {
	policies := map[string]*registered{}
	var board boardState
	generation, err := k.enc.Load(c.cfg.Store, func(etx store.Tx) error {
		if s != nil {
			certs, err := etx.Get(bucketCA, "certificates")
			if err != nil {
				return err
			}
			if k.authority, err = pki.Load(*s, certs); err != nil {
				return err
			}
		}
		switch raw, err := etx.Get(bucketCA, boardRecord); {
		case err != nil:
			return err
		case raw == nil:
			// Never "no board": names would be first come.
			return errNoBoard
		default:
			if board, err = parseBoard(raw); err != nil {
				return err
			}
		}
		return etx.ForEach(bucketPolicies, func(name string, raw []byte) error {
			r, err := decodeRegistered(raw)
			if err != nil {
				return fmt.Errorf("policy %s: %w", name, err)
			}
			policies[name] = r
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("opening the state: %w", err)
	}
	k.policies, k.board, k.generation = policies, board, generation
	return nil
}

// errNoBoard: a state without the board that approves new names, which
// every init writes.
var errNoBoard = errors.New("the state holds no board to approve new policy names: its board record was removed, or it was written before boards")

// FileSealer keeps the seed in a file: development only, since whoever
// reads the file has every secret of this CAS.
type FileSealer struct{ Path string }

func (f FileSealer) Seal(b []byte) error {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return err
	}
	tmp := f.Path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.Path)
}

func (f FileSealer) Unseal() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotSealed
	}
	return b, err
}

func (FileSealer) Insecure() bool { return true }

// NoSealer keeps nothing: every restart needs the owners' shares.
type NoSealer struct{}

func (NoSealer) Seal([]byte) error       { return nil }
func (NoSealer) Unseal() ([]byte, error) { return nil, ErrNotSealed }
func (NoSealer) Insecure() bool          { return false }
