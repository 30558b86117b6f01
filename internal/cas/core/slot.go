package core

import (
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/store"
)

// bucketSealed holds the seed sealed per node (SlotSealer), in the clear:
// each value is ciphertext under a key only that node derives.
const bucketSealed = "sealed"

// SlotSealer seals the seed into CAS's state itself, in the slot of this
// replica's node: under a key this node's TEE derives (SEV-SNP's derived
// key: this chip, image and policy) or, in simulation, a key derived from
// CAS's simulation key and the node's name, which is insecure (whoever
// reads that key unseals every slot). A state the replicas share carries
// each node's sealed seed, so a replica started again on a node, even
// after every replica was gone, unseals its slot without peers or owners.
type SlotSealer struct {
	// Node names the slot.
	Node string
	// Key derives the sealing key (32 bytes), afresh at each use.
	Key func() ([]byte, error)
	// What names the key in errors and logs.
	What string
	// Simulated: the key protects nothing (simulation).
	Simulated bool
}

// Seal and Unseal do nothing: core keeps a SlotSealer's seed in the state.
func (SlotSealer) Seal([]byte) error               { return nil }
func (SlotSealer) Unseal() ([]byte, error)         { return nil, ErrNotSealed }
func (s SlotSealer) Insecure() bool                { return s.Simulated }
func (s SlotSealer) wrap(b []byte) ([]byte, error) { return wrapSeed(s.Key, s.What, b) }

// unsealSlot reads this node's slot of the state and opens it.
func (c *CAS) unsealSlot(s SlotSealer) ([]byte, error) {
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
		return nil, fmt.Errorf("%w for node %s", ErrNotSealed, s.Node)
	}
	return unwrapSeed(s.Key, s.What, "node "+s.Node+"'s slot", raw)
}

// seal keeps the seed where this replica unseals it after a restart: its
// node's slot of the state (written at the state's generation, decided
// again when another replica wrote first), or the sealer's own place. It
// takes the registration lock and must be called without the state lock.
func (c *CAS) seal(s seed.Seed) error {
	slot, ok := c.cfg.Sealer.(SlotSealer)
	if !ok {
		return c.cfg.Sealer.Seal(s.Bytes())
	}
	blob, err := slot.wrap(s.Bytes())
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
