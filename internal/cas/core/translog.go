package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	sumtlog "golang.org/x/mod/sumdb/tlog"

	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
)

// LogKey is the verifier key of the transparency log's checkpoints and
// their origin: derived from the seed, so the same after every restart
// and on every replica.
func (c *CAS) LogKey() (vkey, origin string, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return "", "", err
	}
	return k.logKey, k.logOrigin, nil
}

// LogCheckpoint is the transparency log's checkpoint now, signed, with
// the witnesses' cosignatures once they gave them.
func (c *CAS) LogCheckpoint() ([]byte, error) {
	var out []byte
	err := c.viewLog(func(k *keys, etx store.Tx) error {
		size, err := tlog.Size(etx)
		if err != nil {
			return err
		}
		cosigned, kept, _, err := tlog.Cosigned(etx)
		if err != nil || (cosigned != nil && kept == size) {
			out = cosigned
			return err
		}
		out, err = tlog.Sign(etx, k.logOrigin, k.log)
		return err
	})
	return out, err
}

// LogTile is a tile of the transparency log (a C2SP tlog-tiles path).
func (c *CAS) LogTile(path string) ([]byte, error) {
	if _, err := tlog.ParseTilePath(path); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var out []byte
	err := c.viewLog(func(_ *keys, etx store.Tx) (err error) {
		out, err = tlog.ReadTile(etx, path)
		return err
	})
	return out, err
}

// appendLog appends e to the transparency log in etx, the transaction
// of the change it records.
func appendLog(etx store.Tx, e tlog.Entry) error {
	raw, err := e.Marshal()
	if err != nil {
		return err
	}
	_, err = tlog.Append(etx, raw)
	return err
}

// viewLog reads the log in a read transaction of the keys CAS serves.
func (c *CAS) viewLog(fn func(*keys, store.Tx) error) error {
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return err
	}
	err = k.enc.View(c.cfg.Store, func(etx store.Tx) error { return fn(k, etx) })
	switch {
	case errors.Is(err, tlog.ErrNoTile):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case err != nil:
		return fmt.Errorf("reading the transparency log: %w", err)
	}
	return nil
}

// Cosigner asks the witnesses to cosign a checkpoint of size entries
// (proof proves it extends an older size) and returns the cosignature
// lines it got, with an error when they are fewer than its policy needs.
type Cosigner interface {
	Cosign(ctx context.Context, checkpoint []byte, size int64, proof func(old int64) (sumtlog.TreeProof, error)) ([]byte, error)
}

const (
	// witnessTimeout bounds one round of the witnesses.
	witnessTimeout = 20 * time.Second
	// cosignRefresh is how old the cosignatures of the current
	// checkpoint grow before CAS asks for them again: clients may
	// require recent ones, which a CAS rolled back to an older state
	// cannot get, its witnesses holding a larger checkpoint.
	cosignRefresh = 30 * time.Minute
)

// Witness sends the log's checkpoint to the witnesses unless the state
// keeps their cosignatures of it, made less than cosignRefresh ago, and
// keeps what they answer.
// A witness away or refusing is logged; the next round tries again.
func (c *CAS) Witness(ctx context.Context) {
	if c.cfg.Witnesses == nil {
		return
	}
	c.witnessMu.Lock()
	defer c.witnessMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, witnessTimeout)
	defer cancel()
	var cp []byte
	var size int64
	err := c.viewLog(func(k *keys, etx store.Tx) (err error) {
		if size, err = tlog.Size(etx); err != nil {
			return err
		}
		_, kept, at, err := tlog.Cosigned(etx)
		if err != nil || (kept == size && c.cfg.Clock.Since(at) < cosignRefresh) {
			return err
		}
		cp, err = tlog.Sign(etx, k.logOrigin, k.log)
		return err
	})
	if err != nil || cp == nil {
		if err != nil && !errors.Is(err, ErrNotInitialized) && !errors.Is(err, ErrRecovery) {
			c.cfg.Log.Warn("the transparency log's witnesses: reading the log", "err", err)
		}
		return
	}
	proof := func(old int64) (p sumtlog.TreeProof, err error) {
		err = c.viewLog(func(_ *keys, etx store.Tx) (err error) { p, err = tlog.ProveConsistency(etx, size, old); return err })
		return p, err
	}
	sigs, err := c.cfg.Witnesses.Cosign(ctx, cp, size, proof)
	if err != nil {
		c.cfg.Log.Warn("the transparency log's witnesses did not all cosign", "size", size, "cosignatures", bytes.Count(sigs, []byte("\n")), "err", err)
	}
	if len(sigs) == 0 {
		return
	}
	note, now := append(bytes.Clone(cp), sigs...), c.cfg.Clock.Now()
	_, err = c.commit("the witnesses' cosignatures were kept", func(k *keys, at uint64) (uint64, error) {
		return k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error {
			return tlog.KeepCosigned(etx, note, size, now)
		})
	})
	if err != nil {
		c.cfg.Log.Warn("keeping the witnesses' cosignatures", "err", err)
	}
}

// identityLogged keeps, in the state, the digest of the identity the log
// names last.
const identityLogged = "identity-logged"

// SetIdentity is what this replica's evidence shows (a launch
// measurement and pod policy): the log gets an entry whenever CAS is
// initialised, or ready, under an identity it does not name last.
func (c *CAS) SetIdentity(id string) error {
	c.mu.Lock()
	c.identity = id
	c.mu.Unlock()
	return c.logIdentity()
}

// logIdentity logs the identity SetIdentity gave unless the log names
// it last, or CAS is not ready (init and recovery log it then).
func (c *CAS) logIdentity() error {
	c.mu.RLock()
	id := c.identity
	c.mu.RUnlock()
	if id == "" {
		return nil
	}
	digest := tlog.Digest([]byte(id))
	var logged []byte
	if err := c.viewLog(func(_ *keys, etx store.Tx) (err error) { logged, err = etx.Get(bucketCA, identityLogged); return err }); err != nil {
		if errors.Is(err, ErrNotInitialized) || errors.Is(err, ErrRecovery) {
			return nil
		}
		return err
	}
	if string(logged) == digest {
		return nil
	}
	_, err := c.commit("CAS's identity was logged", func(k *keys, at uint64) (uint64, error) {
		return k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error { return putIdentity(etx, digest) })
	})
	if err == nil {
		c.cfg.Log.Info("audit: CAS runs as an identity its transparency log did not name last", "identity", digest)
	}
	return err
}

// putIdentity logs the identity of digest in etx unless the log names it
// last.
func putIdentity(etx store.Tx, digest string) error {
	if got, err := etx.Get(bucketCA, identityLogged); err != nil || string(got) == digest {
		return err
	}
	if err := etx.Put(bucketCA, identityLogged, []byte(digest)); err != nil {
		return err
	}
	return appendLog(etx, tlog.Entry{Type: tlog.Identity, Digest: digest})
}
