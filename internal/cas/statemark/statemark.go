// Package statemark owns the state's high-water mark. Whoever writes
// CAS's store (a node's root, the holder of CAS's service account token,
// the cluster admin) can put back an older consistent state, or none: the
// integrity record cannot tell, since the older copy was whole. So each
// replica remembers the highest generation it served and that CAS was
// initialised, in memory and in its volume (Store, MACed under a key from
// the seed), and refuses a state below it: it goes to recovery, saying so,
// instead of serving superseded policies or an empty state with no board.
// Only the recovery owners take an older state back (their shares, and
// their signed acceptance of its generation), or initialise CAS anew after
// a loss (their signatures on the init); a token never does again.
package statemark

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

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

// Store keeps the mark where this replica finds it after a restart
// (CAS's volume).
type Store interface {
	// Load returns the mark, or nil when there is none.
	Load() (*Mark, error)
	Save(*Mark) error
}

// MaxSize bounds a stored mark: a few hundred bytes, and the owners a
// share set can have.
const MaxSize = 16 << 10

// Parse reads a stored mark strictly. Its MAC is checked only once
// the seed is known.
func Parse(raw []byte) (*Mark, error) {
	if len(raw) > MaxSize {
		return nil, fmt.Errorf("the state mark is %d bytes, at most %d", len(raw), MaxSize)
	}
	var m Mark
	if err := strictjson.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("the state mark: %w", err)
	}
	switch {
	case len(m.Check) != CheckSize:
		return nil, fmt.Errorf("the state mark: check: %d bytes, want %d", len(m.Check), CheckSize)
	case len(m.MAC) != sha256.Size:
		return nil, fmt.Errorf("the state mark: mac: %d bytes, want %d", len(m.MAC), sha256.Size)
	case len(m.Owners) == 0 || m.Threshold < 1 || m.Threshold > len(m.Owners):
		return nil, fmt.Errorf("the state mark: threshold %d of %d owners", m.Threshold, len(m.Owners))
	}
	return &m, nil
}

// CheckSize is the size of the check value a seed derives (meta.Check).
const CheckSize = 32

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

// Sum is the MAC of the mark under key.
func (m *Mark) Sum(key []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(m.digest())
	return h.Sum(nil)
}

// Verify says whether the MAC is this key's.
func (m *Mark) Verify(key []byte) bool { return hmac.Equal(m.MAC, m.Sum(key)) }

// Public is the mark as CAS shows it (no MAC).
func (m *Mark) Public() *wire.StateMark {
	if m == nil {
		return nil
	}
	return &wire.StateMark{Generation: m.Generation, Owners: slices.Clone(m.Owners), Threshold: m.Threshold, Check: m.Check}
}
