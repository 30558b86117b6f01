package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
)

// maxTile bounds a tile's answer: 256 hashes, or 256 entries of at most
// tlog.MaxEntry bytes each.
const maxTile = 256 * (2 + tlog.MaxEntry)

// LogKey is GET /v1/log/key: the transparency log's origin and verifier
// key, trusted as far as this connection to CAS is.
func (c *Client) LogKey(ctx context.Context) (*wire.LogKey, error) {
	if v := c.vouched; v != nil && v.Log != nil {
		k := *v.Log
		return &k, nil
	}
	var out wire.LogKey
	return &out, c.do(ctx, http.MethodGet, "/v1/log/key", nil, &out)
}

// LogCheckpoint is GET /v1/log/checkpoint, the signed note as served.
func (c *Client) LogCheckpoint(ctx context.Context) ([]byte, error) {
	return c.send(ctx, http.MethodGet, "/v1/log/checkpoint", nil, tlog.MaxCheckpoint)
}

// LogTile is GET /v1/log/PATH of a C2SP tile path (tile/...).
func (c *Client) LogTile(ctx context.Context, path string) ([]byte, error) {
	if _, err := tlog.ParseTilePath(path); err != nil {
		return nil, err
	}
	return c.send(ctx, http.MethodGet, "/v1/log/"+path, nil, maxTile)
}

// LogPolicy is what a client requires of CAS's log beyond CAS's own
// signature: the witnesses' cosignatures, and how recent.
type LogPolicy struct {
	// Witnesses, when not nil, must have cosigned the checkpoint as
	// their policy says.
	Witnesses *witness.Policy
	// MaxAge, with Witnesses, is how old their cosignatures may be (0:
	// any age): a CAS rolled back to an older state keeps its old
	// cosignatures but gets no new ones.
	MaxAge time.Duration
	// Now is the time the age is counted to; zero: now.
	Now time.Time
}

// Check says why a checkpoint (a signed note CAS's signature on it
// checked already) does not meet the policy.
func (p LogPolicy) Check(cp tlog.Checkpoint) error {
	if p.Witnesses == nil {
		return nil
	}
	if !p.Witnesses.Satisfied(cp.Note) {
		return fmt.Errorf("%s lacks the cosignatures the witness policy requires (a witness away, or one that refused a forked or rolled-back log)", cp)
	}
	if p.MaxAge > 0 {
		now := p.Now
		if now.IsZero() {
			now = time.Now()
		}
		if !p.Witnesses.SatisfiedSince(cp.Note, now.Add(-p.MaxAge)) {
			return fmt.Errorf("%s lacks cosignatures made in the last %s that the witness policy requires: CAS's witnesses cosign its log every half hour unless it rolled back (they hold a larger checkpoint) or they are away", cp, p.MaxAge)
		}
	}
	return nil
}

// Checkpoint is CAS's log checkpoint now, checked with the log's key
// (LogKey), and the key's verifier, for proofs against older ones.
func (c *Client) Checkpoint(ctx context.Context) (tlog.Checkpoint, note.Verifier, error) {
	key, err := c.LogKey(ctx)
	if err != nil {
		return tlog.Checkpoint{}, nil, err
	}
	v, err := note.NewVerifier(key.Key)
	if err != nil {
		return tlog.Checkpoint{}, nil, fmt.Errorf("CAS's log key: %w", err)
	}
	raw, err := c.LogCheckpoint(ctx)
	if err != nil {
		return tlog.Checkpoint{}, nil, err
	}
	cp, err := tlog.ParseCheckpoint(raw, key.Origin, v)
	return cp, v, err
}

// Logged checks that every record is an entry of CAS's transparency log
// at its current checkpoint, which meets lp, and that this checkpoint
// extends the one remembered in the file memory, unless "" (which then
// remembers it): a CAS rolled back, or showing this client another history, is
// refused, naming both checkpoints. Its key is trusted as far as this
// connection is.
func (c *Client) Logged(ctx context.Context, memory string, lp LogPolicy, records []wire.Record) (tlog.Checkpoint, error) {
	cp, v, err := c.Checkpoint(ctx)
	if err != nil {
		return tlog.Checkpoint{}, err
	}
	if err := lp.Check(cp); err != nil {
		return cp, err
	}
	fetch := func(path string) ([]byte, error) { return c.LogTile(ctx, path) }
	if memory != "" {
		if err := (tlog.Memory{File: memory}).Advance(cp, v, fetch); err != nil {
			return cp, err
		}
	}
	logged, err := c.Indexed(ctx, cp)
	if err != nil {
		return cp, err
	}
	for _, r := range records {
		if _, ok := logged[EntryOf(r)]; !ok {
			return cp, fmt.Errorf("version %d of %s (digest %s) is not in CAS's transparency log at %s", r.Version, r.Name, r.Digest, cp)
		}
	}
	return cp, nil
}

// EntryOf is the entry CAS's transparency log holds for a policy version.
func EntryOf(r wire.Record) tlog.Entry {
	return tlog.Entry{Type: tlog.PolicyVersion, Policy: tlog.NameHash(r.Name), Version: r.Version, Digest: r.Digest, Predecessor: r.Predecessor, Record: r.Hash()}
}

// Evidence is POST /v1/evidence over nonce, as CAS answered: verify it
// with VerifyVouched.
func (c *Client) Evidence(ctx context.Context, nonce []byte) (*wire.Vouched, error) {
	var v wire.Vouched
	return &v, c.do(ctx, http.MethodPost, "/v1/evidence", &wire.EvidenceRequest{Nonce: nonce}, &v)
}

// Indexed is every entry of the log at cp (read from its tiles, checked
// against cp) and its index.
func (c *Client) Indexed(ctx context.Context, cp tlog.Checkpoint) (map[tlog.Entry]int64, error) {
	entries, err := tlog.Entries(cp, 0, cp.Size, func(path string) ([]byte, error) { return c.LogTile(ctx, path) })
	if err != nil {
		return nil, err
	}
	out := make(map[tlog.Entry]int64, len(entries))
	for i, raw := range entries {
		e, err := tlog.ParseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %d of %s: %w", i, cp, err)
		}
		out[e] = int64(i)
	}
	return out, nil
}
