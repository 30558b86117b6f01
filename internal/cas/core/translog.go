package core

import (
	"errors"
	"fmt"

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

// LogCheckpoint is the transparency log's checkpoint now, signed.
func (c *CAS) LogCheckpoint() ([]byte, error) {
	var out []byte
	err := c.viewLog(func(k *keys, etx store.Tx) (err error) {
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
