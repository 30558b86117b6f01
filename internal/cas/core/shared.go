package core

import (
	"encoding/json"
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Shared is a store that other replicas of CAS write too (the Kubernetes
// API): it calls fn after it took in what they committed.
type Shared interface {
	OnChange(fn func())
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
			c.setState(wire.RecoveryMode, "another replica initialised CAS")
		}
	case wire.Ready:
		k := c.keys
		if err := c.load(k, nil); err != nil {
			c.keys = nil
			c.setState(wire.RecoveryMode, "the state another replica wrote does not open: "+err.Error())
			return
		}
		c.cfg.Metrics.policies.Set(float64(len(k.policies)))
		c.cfg.Log.Debug("took in another replica's change", "generation", k.generation, "policies", len(k.policies))
	}
}
