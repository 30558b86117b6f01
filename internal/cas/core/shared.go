package core

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Shared is a store that other replicas of CAS write too (the Kubernetes
// API): it calls fn after it took in what they committed, as it learns of
// it and whenever Sync asks.
type Shared interface {
	OnChange(fn func())
	// Sync takes in what was committed until now.
	Sync() error
}

// sync takes in what other replicas committed, before this one decides a
// change on its view of the state: a decision on an older view would be
// refused at commit anyway, but one that refuses must not refuse for
// what this replica has not seen yet.
func (c *CAS) sync() error {
	if sh, ok := c.cfg.Store.(Shared); ok {
		if err := sh.Sync(); err != nil {
			return fmt.Errorf("reading the state other replicas of CAS wrote: %w", err)
		}
	}
	return nil
}

// readMeta reads what CAS knows of its seed without having it; nil when
// CAS was never initialised.
func readMeta(s store.Store) (*meta, error) {
	var m *meta
	err := s.View(func(tx store.Tx) error {
		raw, err := tx.Get(bucketMeta, "seed")
		if raw == nil || err != nil {
			return err
		}
		m = &meta{}
		return json.Unmarshal(raw, m)
	})
	if err != nil {
		return nil, fmt.Errorf("reading CAS state: %w", err)
	}
	return m, nil
}

// refresh takes in what another replica committed: an init, or policies
// and the board. A state that no longer opens (its digest does not
// match) leaves CAS in recovery rather than serving it.
func (c *CAS) refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case wire.Uninitialized:
		m, err := readMeta(c.cfg.Store)
		if err != nil {
			c.cfg.Log.Warn("taking in another replica's change", "error", err.Error())
			return
		}
		if m != nil {
			c.meta = m
			const why = "another replica initialised CAS, or a backup was restored"
			c.setState(wire.RecoveryMode, why)
			c.unseal(why + ": ")
		}
	case wire.RecoveryMode:
		// Another replica on this node may have sealed the seed for it,
		// or the state came back (restored): what the sealed seed opens
		// now, or why not (a generation below the mark), is the news.
		if _, none := c.cfg.Sealer.(seal.NoSealer); !none && len(c.shares) == 0 {
			c.unseal("")
		}
	case wire.Ready:
		// A new value, never the old one changed: a registration decides
		// on the keys it took without the state lock, and must see one
		// generation throughout (it is refused at commit if that is old).
		next := *c.keys
		if err := c.load(&next, nil); err != nil {
			// The seed goes with the keys: only a peer or the owners bring
			// this replica back, and only to a state that opens (and, below
			// the mark, one the owners accepted).
			c.keys = nil
			why := "the state another replica wrote does not open: " + err.Error()
			if errors.Is(err, ErrRolledBack) {
				why = err.Error()
				c.cfg.Log.Warn("audit: the state went below this replica's high-water mark: not served", "reason", why)
			}
			c.setState(wire.RecoveryMode, why)
			return
		}
		c.keys = &next
		c.raiseMark(&next, next.generation)
		c.cfg.Metrics.policies.Set(float64(len(next.policies)))
		c.cfg.Log.Debug("took in another replica's change", "generation", next.generation, "policies", len(next.policies))
	}
}
