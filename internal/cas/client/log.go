package client

import (
	"context"
	"fmt"
	"net/http"

	"golang.org/x/mod/sumdb/note"

	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// maxTile bounds a tile's answer: 256 hashes, or 256 entries of at most
// tlog.MaxEntry bytes each.
const maxTile = 256 * (2 + tlog.MaxEntry)

// LogKey is GET /v1/log/key: the transparency log's origin and verifier
// key, trusted as far as this connection to CAS is.
func (c *Client) LogKey(ctx context.Context) (*wire.LogKey, error) {
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

// Logged checks that every record is an entry of CAS's transparency log
// at its current checkpoint, and that this checkpoint extends the one
// remembered in the file memory (which then remembers it): a CAS rolled
// back, or showing this client another history, is refused, naming both
// checkpoints. Its key is trusted as far as this connection is.
func (c *Client) Logged(ctx context.Context, memory string, records []wire.Record) (tlog.Checkpoint, error) {
	key, err := c.LogKey(ctx)
	if err != nil {
		return tlog.Checkpoint{}, err
	}
	v, err := note.NewVerifier(key.Key)
	if err != nil {
		return tlog.Checkpoint{}, fmt.Errorf("CAS's log key: %w", err)
	}
	raw, err := c.LogCheckpoint(ctx)
	if err != nil {
		return tlog.Checkpoint{}, err
	}
	cp, err := tlog.ParseCheckpoint(raw, key.Origin, v)
	if err != nil {
		return tlog.Checkpoint{}, err
	}
	fetch := func(path string) ([]byte, error) { return c.LogTile(ctx, path) }
	if err := (tlog.Memory{File: memory}).Advance(cp, v, fetch); err != nil {
		return cp, err
	}
	entries, err := tlog.Entries(cp, 0, cp.Size, fetch)
	if err != nil {
		return cp, err
	}
	logged := map[tlog.Entry]bool{}
	for i, raw := range entries {
		e, err := tlog.ParseEntry(raw)
		if err != nil {
			return cp, fmt.Errorf("entry %d of %s: %w", i, cp, err)
		}
		logged[e] = true
	}
	for _, r := range records {
		want := tlog.Entry{Type: tlog.PolicyVersion, Policy: tlog.NameHash(r.Name), Version: r.Version, Digest: r.Digest, Predecessor: r.Predecessor, Record: r.Hash()}
		if !logged[want] {
			return cp, fmt.Errorf("version %d of %s (digest %s) is not in CAS's transparency log at %s", r.Version, r.Name, r.Digest, cp)
		}
	}
	return cp, nil
}
