package core

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/cloister-cc/cloister/internal/cas/statemark"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The state's high-water mark (statemark.Mark) is what each replica
// remembers of the state it served; core refuses a state below it.

// ErrRolledBack: the state is older than one this replica served, or
// gone; CAS stays in recovery until the owners decide.
var ErrRolledBack = errors.New("the state is older than one this CAS served")

// Problems with the state a replica reports (wire.PublicKey.StateProblem).
const (
	problemRolledBack = wire.ProblemRolledBack
	problemLost       = wire.ProblemLost
	problemReplaced   = wire.ProblemReplaced
)

// markKey is the MAC key of the marks of the CAS with seed keys k.
func markKey(k *keys) []byte { return k.seed.Key("state-mark", 32) }

// checkMark refuses a state of another CAS than the mark's (its seed is
// not the one this replica served: whoever writes the state put another
// CAS's there, whose shares they hold), and a state at generation gen
// below the mark unless the owners accepted gen. A mark read from the
// volume is first checked by the seed of k, and forgotten if its MAC
// does not verify (its generation was written without the seed). The
// caller holds mu (or has c alone).
func (c *CAS) checkMark(k *keys, gen uint64) error {
	m := c.mark
	if m == nil {
		return nil
	}
	if c.meta == nil || !bytes.Equal(m.Check, c.meta.Check) {
		c.setProblem(problemReplaced)
		return fmt.Errorf("%w: the state is another CAS's than the one this CAS served up to generation %d (another seed): "+
			"it is not taken in its place. Its recovery owners (%d of %v) restore their backup, or sign an init of a new CAS (cloister cas init --approve-key); "+
			"to start over with no tie to it, delete the volumes of CAS's replicas", ErrRolledBack, m.Generation, m.Threshold, m.Owners)
	}
	if !c.markTrusted {
		if !m.Verify(markKey(k)) {
			c.cfg.Log.Warn("the state mark in CAS's volume was not written with this CAS's seed (its generation was changed): ignored")
			c.mark = nil
			return nil
		}
		c.markTrusted = true
	}
	if gen >= m.Generation || c.acceptable[gen] {
		return nil
	}
	c.setProblem(problemRolledBack)
	if gen == 0 {
		c.setProblem(problemLost)
		return fmt.Errorf("%w: the state was removed (it holds no generation), while this CAS served generation %d: "+
			"the recovery owners restore a backup (cloister cas restore) and accept its generation (cloister cas recover --accept-generation)", ErrRolledBack, m.Generation)
	}
	return fmt.Errorf("%w: the state is at generation %d, older than generation %d this CAS served (rolled back, or an older backup restored): "+
		"the recovery owners accept it with their shares (cloister cas recover --accept-generation %d), or restore a newer backup", ErrRolledBack, gen, m.Generation, gen)
}

// raiseMark records that this replica serves generation gen of the state
// keys k open: the mark rises (never falls), in memory and in its volume.
// The caller holds mu.
func (c *CAS) raiseMark(k *keys, gen uint64) {
	if c.meta == nil {
		return
	}
	if m := c.mark; m != nil && c.markTrusted && gen <= m.Generation && bytes.Equal(m.Check, c.meta.Check) {
		return
	}
	next := &statemark.Mark{Generation: gen, Owners: slices.Clone(c.meta.Owners), Threshold: c.meta.Commitment.Threshold(), Check: c.meta.Check}
	if m := c.mark; m != nil && c.markTrusted && bytes.Equal(m.Check, c.meta.Check) {
		next.Generation = max(gen, m.Generation)
	}
	next.MAC = next.Sum(markKey(k))
	c.mark, c.markTrusted = next, true
	c.setProblem("")
	c.cfg.Metrics.mark.Set(float64(next.Generation))
	if c.cfg.Marks != nil {
		if err := c.cfg.Marks.Save(next); err != nil {
			c.cfg.Log.Warn("keeping the state's high-water mark in CAS's volume failed: a restart will not know it", "generation", next.Generation, "error", err.Error())
		}
	}
}

// epochSize spaces the generations an owners' acceptance moves the state
// to: above any generation a replica may have served before it.
const epochSize = 1 << 32

// nextEpoch is the first generation of the epoch after mark's.
func nextEpoch(mark uint64) uint64 { return (mark/epochSize + 1) * epochSize }

// setProblem records the state's problem in the metrics. The caller
// holds mu.
func (c *CAS) setProblem(p string) {
	c.problem = p
	c.cfg.Metrics.setProblem(p)
}
