package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// DialFunc opens the connection to CAS's address: a port-forward, or a
// CAS pod found through the API server, instead of the network's own
// name resolution.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ErrNoEvidence: CAS offers no evidence for its TLS key (it runs without
// a TEE and without simulation), so only a pinned certificate can trust it.
var ErrNoEvidence = errors.New("CAS offers no evidence for its TLS key, so it cannot be trusted by attestation: pin its certificate instead")

// Expect is the CAS a client is willing to talk to when it trusts CAS by
// its evidence rather than by a certificate file.
type Expect struct {
	// Policy is what CAS's evidence must show: its identities, TCB and,
	// with AllowSimulation, whether simulated evidence is accepted.
	// ReportData is set by the client (the TLS key it sees).
	Policy attest.Policy
	// Verify is how the evidence is verified (time, collateral, and for a
	// simulated CAS the simulation key it must be signed by: required).
	Verify verify.Options
}

// Attested is what a client learnt of CAS when it trusted it by evidence.
type Attested struct {
	// Claims are CAS's verified claims; Insecure when simulated.
	Claims *attest.Claims
	// PublicKey is CAS's answer to GET /v1/public-key on the attested
	// connection (state, encryption key).
	PublicKey *wire.PublicKey
}

// NewAttested connects to CAS at baseURL, verifies that the evidence CAS
// offers binds the TLS key it presents (report data = SHA-256 of the key)
// and matches expect, and returns a client pinned to that key: every later
// connection must present the same key. dial may be nil.
func NewAttested(ctx context.Context, baseURL string, expect Expect, dial DialFunc) (*Client, *Attested, error) {
	if err := checkURL(baseURL); err != nil {
		return nil, nil, err
	}
	var seen []byte
	probe := newHTTP(&tls.Config{
		MinVersion: tls.VersionTLS13,
		// Not trusted yet: the evidence below decides. The key is recorded
		// so that the evidence is checked against the key of this very
		// connection.
		InsecureSkipVerify: true, //nolint:gosec // not trusted yet: VerifyConnection records the key, the evidence decides
		VerifyConnection: func(cs tls.ConnectionState) error {
			der, err := x509.MarshalPKIXPublicKey(cs.PeerCertificates[0].PublicKey)
			seen = der
			return err
		},
	}, dial)
	defer probe.CloseIdleConnections()
	var pk wire.PublicKey
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), http: probe}
	if err := c.do(ctx, http.MethodGet, "/v1/public-key", nil, &pk); err != nil {
		return nil, nil, err
	}
	if pk.Evidence == nil {
		return nil, nil, fmt.Errorf("CAS %s: %w", baseURL, ErrNoEvidence)
	}
	pub, err := x509.ParsePKIXPublicKey(seen)
	if err != nil {
		return nil, nil, err
	}
	binding, err := wire.KeyBinding(pub)
	if err != nil {
		return nil, nil, err
	}
	claims, err := checkEvidence(&pk.Identity, binding, expect)
	if err != nil {
		return nil, nil, fmt.Errorf("attesting CAS %s: %w", baseURL, err)
	}
	pinned := seen
	c.http = newHTTP(&tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection below pins the attested key instead; replaced by the pin below
		VerifyConnection: func(cs tls.ConnectionState) error {
			der, err := x509.MarshalPKIXPublicKey(cs.PeerCertificates[0].PublicKey)
			if err != nil {
				return err
			}
			if !bytes.Equal(der, pinned) {
				return errors.New("CAS presented another TLS key than the one its evidence vouched for")
			}
			return nil
		},
	}, dial)
	return c, &Attested{Claims: claims, PublicKey: &pk}, nil
}

// checkEvidence verifies id's evidence, that it binds binding and meets
// expect.
func checkEvidence(id *wire.Identity, binding []byte, expect Expect) (*attest.Claims, error) {
	if id.Evidence == nil {
		return nil, ErrNoEvidence
	}
	if id.Evidence.Type == attest.Sim && expect.Policy.AllowSimulation && len(expect.Verify.SimKeys) == 0 {
		// Any key signs a simulated quote: without a pinned one, whoever
		// answers at CAS's address would be taken for it.
		return nil, attest.Reject(attest.CheckChain, "CAS vouches for itself with simulated evidence, which is taken only from the simulation key it is pinned to, and no key was given")
	}
	claims, err := verify.Evidence(*id.Evidence, withEndorsements(expect.Verify, id))
	if err != nil {
		return nil, err
	}
	p := expect.Policy
	p.ReportData = binding
	if err := p.Check(claims); err != nil {
		return nil, err
	}
	return claims, nil
}

func newHTTP(cfg *tls.Config, dial DialFunc) *http.Client {
	// HTTP/1.1: most clients (a pod's initializer, a CLI command) send
	// one or a few requests per connection, for which HTTP/2's preface,
	// settings and header compression cost more than they save.
	t := &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 64}
	if dial != nil {
		t.DialContext = dial
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: t}
}

func checkURL(baseURL string) error {
	if !strings.HasPrefix(baseURL, "https://") {
		return fmt.Errorf("CAS address %q: use https://HOST:PORT", baseURL)
	}
	return nil
}

// URL is the CAS address the client talks to (https://host:port).
func (c *Client) URL() string { return c.base }

// CloseIdleConnections closes kept-alive connections; the next request
// dials (and is checked) afresh.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Version is GET /v1/version: the version of the CAS binary.
func (c *Client) Version(ctx context.Context) (string, error) {
	var out struct {
		Version string `json:"version"`
	}
	return out.Version, c.do(ctx, http.MethodGet, "/v1/version", nil, &out)
}

// decodeAPIError reads a CAS error response.
func decodeAPIError(status int, data []byte) *APIError {
	var body wire.Error
	if json.Unmarshal(data, &body) != nil || body.Error == "" {
		body.Error = strings.TrimSpace(string(data))
	}
	return &APIError{Status: status, Message: body.Error, Reason: body.Reason}
}

// withEndorsements verifies CAS's SGX or TDX quote with the collateral CAS
// passed on, where the caller gave none of its own: checked against
// Intel's root like any, it can deny CAS, never admit another.
func withEndorsements(opts verify.Options, id *wire.Identity) verify.Options {
	e := id.Endorsements
	if e == nil || (id.Evidence.Type != attest.SGX && id.Evidence.Type != attest.TDX) ||
		opts.CollateralDir != "" || opts.Folder != nil || opts.Intel != nil {
		return opts
	}
	opts.Folder = verify.FolderContents{Intel: intelpcs.Collateral{TCBInfo: e.TCBInfo, QEIdentity: e.QEIdentity, SigningChain: e.SigningChain, PCKCRL: e.PCKCRL, RootCRL: e.RootCRL}}
	return opts
}
