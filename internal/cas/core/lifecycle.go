package core

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/statemark"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
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
	// Approvals, after CAS's state was lost, are its recovery owners'
	// signatures over wire.InitDigest, in place of the token.
	Approvals []wire.OwnerSignature
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
	state, lost, identity := c.state, c.mark, c.identity
	c.mu.RUnlock()
	if state != wire.Uninitialized {
		return nil, ErrInitialized
	}
	if len(owners) == 0 {
		return nil, fmt.Errorf("%w: recoveryOwners: give at least one owner key", ErrInvalid)
	}
	if len(board) == 0 {
		board = owners
	}
	boardThreshold := wire.BoardThreshold(req.BoardThreshold, len(board))
	var err error
	if lost != nil {
		// Never a token again: the owners decide.
		err = approveInit(lost, &req, owners, threshold, board, boardThreshold)
	} else {
		err = c.checkInitToken(token)
	}
	if err != nil {
		c.cfg.Log.Warn("audit: init refused", "reason", err.Error())
		return nil, err
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
	boardRaw, err := marshalBoard(boardState{keys: board, threshold: boardThreshold})
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
		sealed, err := seed.SealShare(sh, owners[i])
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
	slot, inState := c.cfg.Sealer.(seal.SlotSealer)
	var sealed []byte
	if inState {
		if sealed, err = seal.Wrap(slot.Key, slot.What, s.Bytes()); err != nil {
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
		if err := etx.Put(bucketCA, "certificates", authority.Marshal()); err != nil {
			return err
		}
		// The log's first entry: who recovers this CAS and who approves
		// its names.
		if err := appendLog(etx, tlog.Entry{Type: tlog.Init, Digest: tlog.Digest([]byte(strings.Join(fps, ",")), []byte(strconv.Itoa(threshold)), boardRaw)}); err != nil {
			return err
		}
		if identity != "" {
			return putIdentity(etx, tlog.Digest([]byte(identity)))
		}
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("%w: by another replica, just now", ErrInitialized)
	}
	if err != nil {
		return nil, fmt.Errorf("storing the new state: %w", err)
	}
	c.mu.Lock()
	c.meta = m
	// A new CAS: the lost one's mark is not its own.
	c.mark, c.markTrusted = nil, false
	err = c.unlock(s)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out.RootCA = string(pki.CertPEM(authority.Root.Cert.Raw))
	if lost == nil {
		c.cfg.InitToken.Consumed()
	}
	c.cfg.Log.Info("audit: CAS initialised", "recoveryOwners", fps, "threshold", threshold, "insecureSealer", c.cfg.Sealer.Insecure(), "afterLoss", lost != nil)
	return out, nil
}

// approveInit checks an init after the state of the CAS lost was lost:
// the threshold of its recovery owners signed this init (its owners,
// board and thresholds) for that CAS.
func approveInit(lost *statemark.Mark, req *InitRequest, owners []*ecdsa.PublicKey, threshold int, board []*ecdsa.PublicKey, boardThreshold int) error {
	if len(req.Approvals) == 0 {
		return fmt.Errorf("%w: this CAS was initialised and served its state up to generation %d, which is gone: an init token never initialises it again. "+
			"%d of its recovery owners %v sign a new init (cloister cas init --approve-key OWNER.pem), or they restore a backup and recover it", ErrUnauthorized, lost.Generation, lost.Threshold, lost.Owners)
	}
	fps := func(keys []*ecdsa.PublicKey) []string {
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = policy.Fingerprint(k)
		}
		return out
	}
	digest := wire.InitDigest(lost.Check, fps(owners), threshold, fps(board), boardThreshold)
	signed := map[string]bool{}
	for i, a := range req.Approvals {
		fp, err := ownerSigned(lost.Owners, a, digest)
		if err != nil {
			return fmt.Errorf("%w: approvals[%d]: %w", ErrUnauthorized, i, err)
		}
		signed[fp] = true
	}
	if len(signed) < lost.Threshold {
		return fmt.Errorf("%w: approvals: %d of the recovery owners signed this init, %d needed", ErrUnauthorized, len(signed), lost.Threshold)
	}
	return nil
}

// ownerSigned checks that sig is a signature over digest by a key among
// owners (fingerprints) and returns its fingerprint.
func ownerSigned(owners []string, sig wire.OwnerSignature, digest []byte) (string, error) {
	key, err := policy.ParsePublicKey([]byte(sig.Key))
	if err != nil {
		return "", fmt.Errorf("key: %w", err)
	}
	fp := policy.Fingerprint(key)
	if !slices.Contains(owners, fp) {
		return "", fmt.Errorf("%s is not a recovery owner of this CAS (%v)", fp, owners)
	}
	der, err := base64.StdEncoding.DecodeString(sig.Signature)
	if err != nil || !ecdsa.VerifyASN1(key, digest, der) {
		return "", fmt.Errorf("the signature of %s does not verify over this request for this CAS: sign it again", fp)
	}
	return fp, nil
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

// Recover takes one owner's share in recovery mode, and with it that
// owner's acceptance of an older state's generation (accept, or nil);
// with enough of them the seed is rebuilt and CAS is ready again. It
// returns how many more shares are needed.
func (c *CAS) Recover(sh seed.Share, accept *wire.Acceptance) (int, error) {
	need, s, err := c.recover(sh, accept)
	if err != nil || need > 0 {
		return need, err
	}
	if err := c.advance(); err != nil {
		c.cfg.Log.Warn("moving the accepted state past the high-water mark failed: other replicas refuse it until it moves", "error", err.Error())
	}
	if err := c.seal(s); err != nil {
		c.cfg.Log.Warn("sealing the recovered seed failed: the next restart needs the owners again", "error", err.Error())
	}
	if err := c.logIdentity(); err != nil {
		c.cfg.Log.Warn("logging CAS's identity in its transparency log", "error", err.Error())
	}
	return 0, nil
}

// recover takes a share (and an acceptance) under the state lock and,
// with enough of them, unlocks CAS with the seed they make.
func (c *CAS) recover(sh seed.Share, accept *wire.Acceptance) (int, seed.Seed, error) {
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
	if accept != nil {
		fp, err := ownerSigned(c.meta.Owners, accept.OwnerSignature, wire.AcceptDigest(c.meta.Check, accept.Generation))
		if err != nil {
			c.cfg.Log.Warn("audit: acceptance of an older state refused", "generation", accept.Generation, "reason", err.Error())
			return 0, seed.Seed{}, fmt.Errorf("%w: accept: %w", ErrUnauthorized, err)
		}
		c.accepts[fp] = accept.Generation
		c.cfg.Log.Info("audit: a recovery owner accepts an older state", "owner", fp, "generation", accept.Generation)
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
	// A generation the owners' threshold accepted opens below the mark.
	counts := map[uint64]int{}
	for _, g := range c.accepts {
		counts[g]++
	}
	c.acceptable = map[uint64]bool{}
	for g, n := range counts {
		if n >= c.meta.Commitment.Threshold() {
			c.acceptable[g] = true
		}
	}
	if err := c.unlock(s); err != nil {
		return 0, seed.Seed{}, err
	}
	// Acceptances are for this recovery only; what they made acceptable
	// stays until the state moved past the mark (advance).
	c.shares, c.accepts = map[uint64]seed.Share{}, map[string]uint64{}
	return 0, s, nil
}

// advance moves a state the owners accepted below the high-water mark to
// the next epoch of generations, above any a replica served: the other
// replicas take it in, and the acceptance opens no older state again. It
// takes the registration lock and must be called without the state lock.
func (c *CAS) advance() error {
	var from, mark uint64
	gen, err := c.commit("the accepted state was moved past the high-water mark", func(k *keys, at uint64) (uint64, error) {
		c.mu.RLock()
		if c.mark != nil {
			mark = c.mark.Generation
		}
		c.mu.RUnlock()
		if from = at; at >= mark {
			return 0, nil
		}
		return k.enc.Advance(c.cfg.Store, at, nextEpoch(mark))
	})
	c.mu.Lock()
	c.acceptable = nil
	c.mu.Unlock()
	if err != nil || gen == 0 {
		return err
	}
	c.cfg.Log.Info("audit: the state the recovery owners accepted moves past the high-water mark", "from", from, "to", gen, "mark", mark)
	// In the log, whose clients saw a larger one (the accepted state's
	// log is older): they learn why CAS went back.
	_, err = c.commit("the acceptance was logged", func(k *keys, at uint64) (uint64, error) {
		return k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error {
			return appendLog(etx, tlog.Entry{Type: tlog.Accept, Version: int(min(from, math.MaxInt64)),
				Digest: tlog.Digest([]byte(strconv.FormatUint(from, 10)), []byte(strconv.FormatUint(gen, 10)))})
		})
	})
	return err
}

// commit stores a change (write, at the state's generation at) under the
// registration lock, again when another replica wrote first
// (store.ErrConflict), and takes the generation it reached into the keys
// CAS serves and the mark. write returns 0 when there is nothing to
// store. It must be called without the state lock.
func (c *CAS) commit(what string, write func(k *keys, at uint64) (uint64, error)) (uint64, error) {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	for range maxSecretRounds {
		if err := c.sync(); err != nil {
			return 0, err
		}
		c.mu.RLock()
		k, err := c.ready()
		var at uint64
		if err == nil {
			at = k.generation
		}
		c.mu.RUnlock()
		if err != nil {
			return 0, err
		}
		gen, err := write(k, at)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil || gen == 0 {
			return 0, err
		}
		c.mu.Lock()
		if cur := c.keys; cur != nil && cur.generation < gen {
			cur.generation = gen
			c.raiseMark(cur, gen)
		}
		c.mu.Unlock()
		return gen, nil
	}
	return 0, fmt.Errorf("the state kept changing while %s", what)
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
	logKey := ed25519.NewKeyFromSeed(s.Key("log-checkpoint", ed25519.SeedSize))
	name := k.authority.TrustDomain()
	k.log, k.logOrigin = tlog.NewSigner(name, logKey), tlog.Origin(name)
	if k.logKey, err = tlog.VerifierKey(name, logKey.Public().(ed25519.PublicKey)); err != nil {
		return err
	}
	c.keys = k
	c.raiseMark(k, k.generation)
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
	// Below the mark first, unless the state does not even match its
	// digest (said as such): a removed state has no board or CAs either,
	// and what matters is that it went backwards.
	if !errors.Is(err, store.ErrIntegrity) && !errors.Is(err, store.ErrTampered) {
		if err := c.checkMark(k, generation); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("opening the state: %w", err)
	}
	k.policies, k.board, k.generation = policies, board, generation
	return nil
}

// errNoBoard: a state without the board that approves new names, which
// every init writes.
var errNoBoard = errors.New("the state holds no board to approve new policy names: its board record was removed, or it was written before boards")
