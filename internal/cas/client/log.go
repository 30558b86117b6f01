package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

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
	return c.raw(ctx, "/v1/log/checkpoint", tlog.MaxCheckpoint)
}

// LogTile is GET /v1/log/PATH of a C2SP tile path (tile/...).
func (c *Client) LogTile(ctx context.Context, path string) ([]byte, error) {
	if _, err := tlog.ParseTilePath(path); err != nil {
		return nil, err
	}
	return c.raw(ctx, "/v1/log/"+path, maxTile)
}

// raw GETs path's body as it is, at most limit bytes.
func (c *Client) raw(ctx context.Context, path string, limit int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("CAS %s: %w", c.base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, decodeAPIError(resp.StatusCode, data)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("CAS %s%s: an answer over %d bytes", c.base, path, limit)
	}
	return data, nil
}
