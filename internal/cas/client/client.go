// Package client is the CAS API's client side: the CLI's `cloister cas`
// commands and the initializer of confidential pods use it. Attest makes
// the workload's key and CSR, gets evidence binding the key, and writes
// what CAS returns into a directory.
package client

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Client talks to one CAS.
type Client struct {
	base string
	http *http.Client
	// vouched, when set, is CAS's attested statement (NewVouched): the
	// keys and CAs answers must name.
	vouched *wire.Statement
}

// New makes a client for the CAS at baseURL (https://host:port) that
// trusts caPEM (the CAS's TLS certificate or a CA that issued it). dial,
// when set, opens the connections (e.g. through a port-forward).
func New(baseURL string, caPEM []byte, dial DialFunc) (*Client, error) {
	if err := checkURL(baseURL); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("CAS CA bundle: no PEM certificate in it")
	}
	return &Client{
		base: strings.TrimSuffix(baseURL, "/"),
		http: newHTTP(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}, dial),
	}, nil
}

// APIError is a CAS error response.
type APIError struct {
	Status  int
	Message string
	// Reason is CAS's short reason: a failing attestation check
	// (identity, debug, ...), unauthorized, invalid, recovery, ...
	Reason string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("CAS: %s (%d, %s)", e.Message, e.Status, e.Reason)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	data, err := c.send(ctx, method, path, in, maxAnswer)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// maxAnswer bounds an answer of the JSON API.
const maxAnswer = 8 << 20

// send calls CAS with in as JSON (if any) and returns the body of a
// successful answer, at most limit bytes; an error answer is an APIError.
func (c *Client) send(ctx context.Context, method, path string, in any, limit int) ([]byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
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

// PublicKey is GET /v1/public-key.
func (c *Client) PublicKey(ctx context.Context) (*wire.PublicKey, error) {
	var out wire.PublicKey
	if err := c.do(ctx, http.MethodGet, "/v1/public-key", nil, &out); err != nil {
		return nil, err
	}
	if v := c.vouched; v != nil && v.EncryptionKey != "" && out.EncryptionKey != v.EncryptionKey {
		return nil, errNotVouched("encryption key")
	}
	return &out, nil
}

// Init is POST /v1/init, with the init token CAS was started with and a
// board whose threshold is a majority.
func (c *Client) Init(ctx context.Context, owners []string, threshold int, token string, board ...string) (*wire.Shares, error) {
	return c.InitWith(ctx, &wire.InitRequest{RecoveryOwners: owners, Threshold: threshold, Token: token, Board: board})
}

// InitWith is POST /v1/init.
func (c *Client) InitWith(ctx context.Context, req *wire.InitRequest) (*wire.Shares, error) {
	var out wire.Shares
	return &out, c.do(ctx, http.MethodPost, "/v1/init", req, &out)
}

// InitInto initialises CAS and writes the sealed shares it answers with
// into path (0600): CAS keeps none, so they exist only there.
func (c *Client) InitInto(ctx context.Context, req *wire.InitRequest, path string) (*wire.Shares, error) {
	shares, err := c.InitWith(ctx, req)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(shares, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing the shares: %w (they are lost: CAS keeps none; it works until it restarts)", err)
	}
	return shares, nil
}

// Recover is POST /v1/recover with one opened share.
func (c *Client) Recover(ctx context.Context, sh seed.Share, force bool) (*wire.RecoverResponse, error) {
	return c.RecoverWith(ctx, &wire.RecoverRequest{Share: sh, Force: force})
}

// RecoverWith is POST /v1/recover.
func (c *Client) RecoverWith(ctx context.Context, req *wire.RecoverRequest) (*wire.RecoverResponse, error) {
	var out wire.RecoverResponse
	return &out, c.do(ctx, http.MethodPost, "/v1/recover", req, &out)
}

// OwnerSignature is key's signature over digest, as a recovery owner
// gives it (an acceptance, an init's approval).
func OwnerSignature(key *ecdsa.PrivateKey, digest []byte) (wire.OwnerSignature, error) {
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest)
	if err != nil {
		return wire.OwnerSignature{}, err
	}
	return wire.OwnerSignature{Key: string(policy.MarshalPublicKey(&key.PublicKey)), Signature: base64.StdEncoding.EncodeToString(sig)}, nil
}

// RegisterPolicy is POST /v1/policies.
func (c *Client) RegisterPolicy(ctx context.Context, req wire.PolicyRequest) (*wire.Registration, error) {
	var out wire.Registration
	return &out, c.do(ctx, http.MethodPost, "/v1/policies", req, &out)
}

// CAs returns CAS's root and mesh CA certificates.
func (c *Client) CAs(ctx context.Context) (*wire.CAs, error) {
	if v := c.vouched; v != nil && v.CAs != nil {
		cas := *v.CAs
		return &cas, nil
	}
	var out wire.CAs
	return &out, c.do(ctx, http.MethodGet, "/v1/ca", nil, &out)
}

// Policy is GET /v1/policies/{name}: the current version's record.
func (c *Client) Policy(ctx context.Context, name string) (*wire.Record, error) {
	var out wire.Record
	return &out, c.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(name), nil, &out)
}

// LinkFor is the link a document of policy name with digest is signed
// with: version 1 for a policy CAS does not hold, the current version's
// own link for the document CAS holds, else one more than the current
// version.
func (c *Client) LinkFor(ctx context.Context, name, digest string) (policy.Link, error) {
	rec, err := c.Policy(ctx, name)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return policy.Link{Version: 1}, nil
	}
	if err != nil {
		return policy.Link{}, err
	}
	if rec.Digest == digest {
		return policy.Link{Version: rec.Version, Predecessor: rec.Predecessor}, nil
	}
	return policy.Link{Version: rec.Version + 1, Predecessor: rec.Digest}, nil
}

// History is GET /v1/policies/{name}/history.
func (c *Client) History(ctx context.Context, name string) (*wire.History, error) {
	var out wire.History
	if err := c.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(name)+"/history", nil, &out); err != nil {
		return nil, err
	}
	if v := c.vouched; v != nil && out.HistoryKey != v.HistoryKey {
		return nil, errNotVouched("history key")
	}
	return &out, nil
}

// ReadHistory is a policy's history with its documents, read with an
// owner's key: GET /v1/challenge, then POST /v1/policies/{name}/read
// with the owner's signature over the challenge.
func (c *Client) ReadHistory(ctx context.Context, name string, owner *ecdsa.PrivateKey) (*wire.History, error) {
	var ch wire.Challenge
	if err := c.do(ctx, http.MethodGet, "/v1/challenge", nil, &ch); err != nil {
		return nil, err
	}
	req, err := wire.SignRead(owner, name, ch.Challenge)
	if err != nil {
		return nil, err
	}
	var out wire.History
	return &out, c.do(ctx, http.MethodPost, "/v1/policies/"+url.PathEscape(name)+"/read", req, &out)
}

// ChangeBoard replaces CAS's board by keys (PEM) of which threshold
// approve a name (0: a majority), signed by members of the current board:
// GET /v1/public-key for the board's version and the CAS the change is
// bound to, then POST /v1/board. CAS needs the current board's threshold,
// and at least a majority, among members.
func (c *Client) ChangeBoard(ctx context.Context, keys []string, threshold int, members ...*ecdsa.PrivateKey) (*wire.Board, error) {
	pk, err := c.PublicKey(ctx)
	if err != nil {
		return nil, err
	}
	req := wire.BoardChange{Version: pk.BoardVersion + 1, Keys: keys, Threshold: threshold}
	fps := make([]string, len(keys))
	for i, p := range keys {
		k, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("board key %d: %w", i, err)
		}
		fps[i] = policy.Fingerprint(k)
	}
	digest := wire.BoardDigest(pk.EncryptionKey, req.Version, wire.BoardThreshold(threshold, len(keys)), fps)
	for _, m := range members {
		sig, err := ecdsa.SignASN1(rand.Reader, m, digest)
		if err != nil {
			return nil, err
		}
		req.Signatures = append(req.Signatures, policy.Signature{Signer: policy.Fingerprint(&m.PublicKey), Signature: base64.StdEncoding.EncodeToString(sig)})
	}
	var out wire.Board
	return &out, c.do(ctx, http.MethodPost, "/v1/board", req, &out)
}

// AttestRaw is POST /v1/attest.
func (c *Client) AttestRaw(ctx context.Context, req *wire.AttestRequest) (*wire.AttestResult, error) {
	var out wire.AttestResult
	return &out, c.do(ctx, http.MethodPost, "/v1/attest", req, &out)
}

// PeerSeed asks a ready replica of this CAS for the root seed, sealed to
// the key req's evidence binds.
func (c *Client) PeerSeed(ctx context.Context, req *wire.PeerSeedRequest) (*wire.PeerSeedResponse, error) {
	var out wire.PeerSeedResponse
	return &out, c.do(ctx, http.MethodPost, "/v1/peer/seed", req, &out)
}
