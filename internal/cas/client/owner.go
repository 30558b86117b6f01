package client

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// ErrNoShare is returned when a shares file holds none for a key.
var ErrNoShare = errors.New("holds no share for the key")

// ErrNothingToApprove is returned when owners approve an init of a CAS
// that did not lose a state it served: its init token initialises it.
var ErrNothingToApprove = errors.New("this CAS did not lose a state it served, so nothing for its owners to approve: initialise it with its init token")

// ErrNoStateMark is returned when an owner accepts an older state of a
// CAS that keeps no high-water mark, so has none to accept.
var ErrNoStateMark = errors.New("this CAS keeps no high-water mark of its state, so it has no older state to accept")

// OwnShare opens the recovery share sealed to key in the shares file that
// an init wrote.
func OwnShare(sharesFile string, key *ecdsa.PrivateKey) (seed.Share, error) {
	raw, err := os.ReadFile(sharesFile)
	if err != nil {
		return seed.Share{}, fmt.Errorf("the shares: %w", err)
	}
	var shares wire.Shares
	if err := json.Unmarshal(raw, &shares); err != nil {
		return seed.Share{}, fmt.Errorf("the shares %s: %w", sharesFile, err)
	}
	fp := policy.Fingerprint(&key.PublicKey)
	for i := range shares.Shares {
		if shares.Shares[i].Owner == fp {
			return seed.OpenShare(shares.Shares[i].Sealed, key)
		}
	}
	return seed.Share{}, fmt.Errorf("%s %w %s", sharesFile, ErrNoShare, fp)
}

// RecoverAs sends an owner's share; with accept, also the owner's
// acceptance of the older state CAS holds at that generation, signed over
// CAS's own mark of its state so it cannot be replayed to another.
func (c *Client) RecoverAs(ctx context.Context, share seed.Share, key *ecdsa.PrivateKey, force bool, accept *uint64) (*wire.RecoverResponse, error) {
	req := &wire.RecoverRequest{Share: share, Force: force}
	if accept != nil {
		pk, err := c.PublicKey(ctx)
		if err != nil {
			return nil, err
		}
		if pk.StateMark == nil {
			return nil, ErrNoStateMark
		}
		sig, err := OwnerSignature(key, wire.AcceptDigest(pk.StateMark.Check, *accept))
		if err != nil {
			return nil, err
		}
		req.Accept = &wire.Acceptance{Generation: *accept, OwnerSignature: sig}
	}
	return c.RecoverWith(ctx, req)
}

// ApproveInit is the recovery owners' signatures on an init of a CAS that
// lost the state it served: over CAS's mark of that state and the new
// owners, board and thresholds, so they approve this init alone.
func (c *Client) ApproveInit(ctx context.Context, req *wire.InitRequest, keys []*ecdsa.PrivateKey) ([]wire.OwnerSignature, error) {
	pk, err := c.PublicKey(ctx)
	if err != nil {
		return nil, err
	}
	if pk.StateMark == nil || pk.StateProblem != wire.ProblemLost {
		return nil, ErrNothingToApprove
	}
	owners, err := fingerprints(req.RecoveryOwners)
	if err != nil {
		return nil, err
	}
	board := owners
	if len(req.Board) > 0 {
		if board, err = fingerprints(req.Board); err != nil {
			return nil, err
		}
	}
	digest := wire.InitDigest(pk.StateMark.Check, owners, req.Threshold, board, wire.BoardThreshold(req.BoardThreshold, len(board)))
	out := make([]wire.OwnerSignature, 0, len(keys))
	for _, key := range keys {
		sig, err := OwnerSignature(key, digest)
		if err != nil {
			return nil, err
		}
		out = append(out, sig)
	}
	return out, nil
}

// fingerprints are the fingerprints of PEM public keys.
func fingerprints(pems []string) ([]string, error) {
	out := make([]string, len(pems))
	for i, p := range pems {
		k, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return nil, err
		}
		out[i] = policy.Fingerprint(k)
	}
	return out, nil
}
