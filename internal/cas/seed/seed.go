// Package seed owns CAS's root secret: its generation, the keys derived
// from it (HKDF-SHA256, one label per use), and its k-of-n split into
// shares for the recovery owners (Shamir over Ristretto255 scalars with
// Feldman commitments from cloudflare/circl, so a wrong share is refused
// on arrival instead of silently yielding a wrong seed).
package seed

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/secretsharing"
)

var g = group.Ristretto255

// Seed is the root secret: a Ristretto255 scalar.
type Seed struct{ s group.Scalar }

// New makes a fresh seed.
func New() Seed { return Seed{g.RandomScalar(rand.Reader)} }

// Bytes is the 32-byte encoding of the seed (for a sealer to keep).
func (s Seed) Bytes() []byte {
	b, err := s.s.MarshalBinary()
	if err != nil {
		panic("seed: marshalling a scalar: " + err.Error())
	}
	return b
}

// FromBytes reads Bytes' encoding.
func FromBytes(b []byte) (Seed, error) {
	s := g.NewScalar()
	if err := s.UnmarshalBinary(b); err != nil {
		return Seed{}, fmt.Errorf("seed: %w", err)
	}
	return Seed{s}, nil
}

// Key derives n bytes for one use, named by label; the same seed and
// label always give the same key.
func (s Seed) Key(label string, n int) []byte {
	k, err := hkdf.Key(sha256.New, s.Bytes(), nil, "cloister.dev/cas/"+label, n)
	if err != nil {
		panic("seed: deriving " + label + ": " + err.Error())
	}
	return k
}

// Share is one recovery owner's part of the seed.
type Share struct {
	ID    uint64 `json:"id"`
	Value []byte `json:"value"`
}

// Commitment lets anyone check a share belongs to the seed it was split
// from, without learning the seed. It is stored in the clear.
type Commitment [][]byte

// Split makes n shares, any k of which recover the seed.
func (s Seed) Split(k, n int) ([]Share, Commitment, error) {
	if k < 1 || n < k || n > 255 {
		return nil, nil, fmt.Errorf("threshold %d of %d owners: want 1 <= threshold <= owners <= 255", k, n)
	}
	ss := secretsharing.New(rand.Reader, uint(k-1), s.s)
	var shares []Share
	for _, sh := range ss.Share(uint(n)) {
		id, err := scalarID(sh.ID)
		if err != nil {
			return nil, nil, err
		}
		v, err := sh.Value.MarshalBinary()
		if err != nil {
			return nil, nil, err
		}
		shares = append(shares, Share{ID: id, Value: v})
	}
	var c Commitment
	for _, e := range ss.CommitSecret() {
		b, err := e.MarshalBinaryCompress()
		if err != nil {
			return nil, nil, err
		}
		c = append(c, b)
	}
	return shares, c, nil
}

// scalarID reads circl's share IDs (1..n) back as integers.
func scalarID(id group.Scalar) (uint64, error) {
	for i := uint64(1); i <= 255; i++ {
		if id.IsEqual(g.NewScalar().SetUint64(i)) {
			return i, nil
		}
	}
	return 0, errors.New("seed: share id out of range")
}

// Threshold is how many shares the commitment's polynomial needs.
func (c Commitment) Threshold() int { return len(c) }

func (c Commitment) elements() ([]group.Element, error) {
	out := make([]group.Element, len(c))
	for i, b := range c {
		e := g.NewElement()
		if err := e.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("seed: commitment %d: %w", i, err)
		}
		out[i] = e
	}
	return out, nil
}

func (sh Share) scalars() (secretsharing.Share, error) {
	if sh.ID < 1 || sh.ID > 255 {
		return secretsharing.Share{}, fmt.Errorf("share id %d: want 1..255", sh.ID)
	}
	v := g.NewScalar()
	if err := v.UnmarshalBinary(sh.Value); err != nil {
		return secretsharing.Share{}, fmt.Errorf("share %d: not a share value: %w", sh.ID, err)
	}
	return secretsharing.Share{ID: g.NewScalar().SetUint64(sh.ID), Value: v}, nil
}

// Verify checks a share belongs to the seed behind the commitment.
func (c Commitment) Verify(sh Share) error {
	elems, err := c.elements()
	if err != nil {
		return err
	}
	s, err := sh.scalars()
	if err != nil {
		return err
	}
	if len(elems) == 0 || !secretsharing.Verify(uint(len(elems)-1), s, elems) {
		return fmt.Errorf("share %d is not a share of this CAS's seed", sh.ID)
	}
	return nil
}

// Combine recovers the seed from at least Threshold distinct verified
// shares.
func (c Commitment) Combine(shares []Share) (Seed, error) {
	seen := map[uint64]bool{}
	var ss []secretsharing.Share
	for _, sh := range shares {
		if seen[sh.ID] {
			continue // Recover panics on repeated ids
		}
		if err := c.Verify(sh); err != nil {
			return Seed{}, err
		}
		s, _ := sh.scalars()
		seen[sh.ID] = true
		ss = append(ss, s)
	}
	if len(ss) < c.Threshold() {
		return Seed{}, fmt.Errorf("%d of %d shares: %d more needed", len(ss), c.Threshold(), c.Threshold()-len(ss))
	}
	secret, err := secretsharing.Recover(uint(c.Threshold()-1), ss)
	if err != nil {
		return Seed{}, err
	}
	return Seed{secret}, nil
}
