package core

import (
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/store"
)

// bucketSealed holds the seed sealed per node (SlotSealer), in the clear:
// each value is ciphertext under a key only that node derives.
const bucketSealed = "sealed"

// unsealSlot reads this node's slot of the state and opens it.
func (c *CAS) unsealSlot(s seal.SlotSealer) ([]byte, error) {
	var raw []byte
	err := c.cfg.Store.View(func(tx store.Tx) error {
		var err error
		raw, err = tx.Get(bucketSealed, s.Node)
		return err
	})
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fmt.Errorf("%w for node %s", seal.ErrNotSealed, s.Node)
	}
	return seal.Unwrap(s.Key, s.What, "node "+s.Node+"'s slot", raw)
}

// seal keeps the seed where this replica unseals it after a restart: its
// node's slot of the state (written at the state's generation, decided
// again when another replica wrote first), or the sealer's own place. It
// takes the registration lock and must be called without the state lock.
func (c *CAS) seal(s seed.Seed) error {
	slot, ok := c.cfg.Sealer.(seal.SlotSealer)
	if !ok {
		return c.cfg.Sealer.Seal(s.Bytes())
	}
	blob, err := seal.Wrap(slot.Key, slot.What, s.Bytes())
	if err != nil {
		return err
	}
	_, err = c.commit("the seed was sealed for node "+slot.Node, func(k *keys, at uint64) (uint64, error) {
		return k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error { return etx.Put(bucketSealed, slot.Node, blob) })
	})
	if err != nil {
		return err
	}
	c.cfg.Log.Info("the seed is sealed in this node's slot of the state", "node", slot.Node, "key", slot.What, "insecure", slot.Simulated)
	return nil
}
