package core

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The state's high-water mark. Whoever writes CAS's store (a node's root,
// the holder of CAS's service account token, the cluster admin) can put
// back an older consistent state, or none: the integrity record cannot
// tell, since the older copy was whole. So each replica remembers the
// highest generation it served and that CAS was initialised, in memory
// and in its volume (MarkStore, MACed under a key from the seed), and
// refuses a state below it: it goes to recovery, saying so, instead of
// serving superseded policies or an empty state with no board. Only the
// recovery owners take an older state back (their shares, and their
// signed acceptance of its generation), or initialise CAS anew after a
// loss (their signatures on the init); a token never does again.

// Mark is what a replica remembers of the state it served.
type Mark struct {
	// Generation is the highest generation of the state this CAS served.
	Generation uint64 `json:"generation"`
	// Owners (fingerprints) and Threshold are CAS's recovery owners, and
	// how many of them recover it: after a loss, an init needs Threshold
	// of their signatures.
	Owners    []string `json:"owners"`
	Threshold int      `json:"threshold"`
	// Check names the CAS (its seed's check value): a mark of another
	// CAS is not this one's.
	Check []byte `json:"check"`
	// MAC, under a key from the seed, covers the fields above: a mark
	// whose MAC does not verify was not written by this CAS.
	MAC []byte `json:"mac"`
}

// MarkStore keeps the mark where this replica finds it after a restart
// (CAS's volume).
type MarkStore interface {
	// Load returns the mark, or nil when there is none.
	Load() (*Mark, error)
	Save(*Mark) error
}

// maxMark bounds a stored mark: a few hundred bytes, and the owners a
// share set can have.
const maxMark = 16 << 10

// ParseMark reads a stored mark strictly. Its MAC is checked only once
// the seed is known.
func ParseMark(raw []byte) (*Mark, error) {
	if len(raw) > maxMark {
		return nil, fmt.Errorf("the state mark is %d bytes, at most %d", len(raw), maxMark)
	}
	var m Mark
	if err := strictjson.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("the state mark: %w", err)
	}
	switch {
	case len(m.Check) != checkSize:
		return nil, fmt.Errorf("the state mark: check: %d bytes, want %d", len(m.Check), checkSize)
	case len(m.MAC) != sha256.Size:
		return nil, fmt.Errorf("the state mark: mac: %d bytes, want %d", len(m.MAC), sha256.Size)
	case len(m.Owners) == 0 || m.Threshold < 1 || m.Threshold > len(m.Owners):
		return nil, fmt.Errorf("the state mark: threshold %d of %d owners", m.Threshold, len(m.Owners))
	}
	return &m, nil
}

// checkSize is the size of the check value a seed derives (meta.Check).
const checkSize = 32

// digest is what the MAC covers, in a form that has one encoding.
func (m *Mark) digest() []byte {
	var b bytes.Buffer
	b.WriteString("cloister.dev/state-mark/v1\x00")
	b.Write(binary.BigEndian.AppendUint64(nil, m.Generation))
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(m.Threshold)))   //nolint:gosec // at most the owners' count
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(m.Owners)))) //nolint:gosec // a mark is at most 16 KiB
	for _, o := range m.Owners {
		b.WriteString(o)
		b.WriteByte(0)
	}
	b.Write(m.Check)
	return b.Bytes()
}

func (m *Mark) sum(key []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(m.digest())
	return h.Sum(nil)
}

// verify says whether the MAC is this key's.
func (m *Mark) verify(key []byte) bool { return hmac.Equal(m.MAC, m.sum(key)) }

// Public is the mark as CAS shows it (no MAC).
func (m *Mark) Public() *wire.StateMark {
	if m == nil {
		return nil
	}
	return &wire.StateMark{Generation: m.Generation, Owners: slices.Clone(m.Owners), Threshold: m.Threshold, Check: m.Check}
}

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
		if !m.verify(markKey(k)) {
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
	next := &Mark{Generation: gen, Owners: slices.Clone(c.meta.Owners), Threshold: c.meta.Commitment.Threshold(), Check: c.meta.Check}
	if m := c.mark; m != nil && c.markTrusted && bytes.Equal(m.Check, c.meta.Check) {
		next.Generation = max(gen, m.Generation)
	}
	next.MAC = next.sum(markKey(k))
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
