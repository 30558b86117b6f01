package core

import (
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Seed is the root seed of a ready CAS, for a peer replica whose evidence
// the caller verified: it is this CAS's identity, and the caller must hand
// it only sealed to a key that evidence binds.
func (c *CAS) Seed() ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, err
	}
	return k.seed.Bytes(), nil
}

// SharesReceived counts the owners' shares submitted in recovery mode.
func (c *CAS) SharesReceived() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.shares)
}

// Adopt takes the root seed a ready peer handed over: a CAS in recovery
// mode unlocks with it (if it is this CAS's) and seals it as its sealer
// says, so that its next restart needs neither peers nor owners.
func (c *CAS) Adopt(raw []byte) error {
	s, err := seed.FromBytes(raw)
	if err != nil {
		return fmt.Errorf("%w: the seed a peer sent: %w", ErrInvalid, err)
	}
	c.mu.Lock()
	switch c.state {
	case wire.Ready:
		c.mu.Unlock()
		return nil
	case wire.Uninitialized:
		c.mu.Unlock()
		return ErrNotInitialized
	}
	err = c.unlock(s)
	if err == nil {
		c.shares = map[uint64]seed.Share{}
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("the seed a peer sent does not open this state: %w", err)
	}
	c.cfg.Log.Info("audit: CAS unlocked with the seed of an attested peer")
	if err := c.seal(s); err != nil {
		c.cfg.Log.Warn("sealing the seed a peer sent failed: the next restart needs a peer or the owners again", "error", err.Error())
	}
	return nil
}
