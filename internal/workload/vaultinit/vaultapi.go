package vaultinit

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// maxAnswer bounds what is read of one of Vault's answers.
const maxAnswer = 64 << 10

// API is the part of Vault's HTTP API Cloister uses: the bootstrap on
// its replica's own Vault, the operator on each replica. It talks to
// addr over TLS with tlsConfig (CAS's root, the replica's name).
type API struct {
	http  *http.Client
	base  string
	token string
}

// NewAPI is Vault's API at addr, over TLS as tlsConfig says.
func NewAPI(addr string, tlsConfig *tls.Config) *API {
	tr := &http.Transport{
		TLSClientConfig: tlsConfig,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	_, port, _ := net.SplitHostPort(addr)
	return &API{http: &http.Client{Transport: tr}, base: "https://" + net.JoinHostPort(tlsConfig.ServerName, port)}
}

// newVaultAPI is the replica's own Vault, trusted by CAS's root for the
// replica's name.
func newVaultAPI(addr, serverName string, roots *x509.CertPool) *API {
	return NewAPI(addr, &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS13})
}

// errInUse: Vault answered that a path is already mounted or enabled,
// which a bootstrap done before leaves so.
var errInUse = errors.New("already in use")

// do calls Vault. Vault's error texts go into the error; they name
// paths, never the token or keys a request carried.
func (v *API) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, v.base+path, body)
	if err != nil {
		return err
	}
	if v.token != "" {
		req.Header.Set("X-Vault-Token", v.token)
	}
	res, err := v.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = res.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", method, path, err)
	case len(data) > maxAnswer:
		return fmt.Errorf("%s %s: answer over %d bytes", method, path, maxAnswer)
	case res.StatusCode >= 300:
		var e struct {
			Errors []string `json:"errors"`
		}
		_ = json.Unmarshal(data, &e)
		msg := strings.Join(e.Errors, "; ")
		if res.StatusCode == http.StatusBadRequest && (strings.Contains(msg, "path is already in use") || strings.Contains(msg, "already in use")) {
			return fmt.Errorf("%s %s: %w", method, path, errInUse)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, msg)
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// Health is a replica's sys/health, every state answering 200. Vault
// adds fields between versions: only these are read.
type Health struct {
	Initialized bool   `json:"initialized"`
	Sealed      bool   `json:"sealed"`
	Standby     bool   `json:"standby"`
	Version     string `json:"version"`
}

// Health reads the replica's sys/health (unauthenticated).
func (v *API) Health(ctx context.Context) (Health, error) {
	var h Health
	err := v.do(ctx, http.MethodGet, "/v1/sys/health?standbyok=true&perfstandbyok=true&sealedcode=200&uninitcode=200", nil, &h)
	return h, err
}

// Leader is a replica's sys/leader: the raft leader's address as the
// replica knows it, and whether it is the leader.
type Leader struct {
	IsSelf  bool   `json:"is_self"`
	Address string `json:"leader_address"`
}

// Leader reads the replica's sys/leader (unauthenticated).
func (v *API) Leader(ctx context.Context) (Leader, error) {
	var l Leader
	err := v.do(ctx, http.MethodGet, "/v1/sys/leader", nil, &l)
	return l, err
}

// Recovery reads the recovery bundle the bootstrap serves (ciphertext).
func (v *API) Recovery(ctx context.Context) ([]byte, error) {
	var raw json.RawMessage
	err := v.do(ctx, http.MethodGet, RecoveryPath, nil, &raw)
	return raw, err
}

// initResult is what sys/init answers under a seal that unseals itself:
// recovery keys (base64, as vault operator generate-root takes them) and
// the root token, no unseal keys.
type initResult struct {
	RecoveryKeys [][]byte
	RootToken    string
}

func (v *API) init(ctx context.Context, shares, threshold int) (*initResult, error) {
	var res struct {
		RecoveryKeysB64 []string `json:"recovery_keys_base64"`
		RootToken       string   `json:"root_token"`
	}
	if err := v.do(ctx, http.MethodPut, "/v1/sys/init", map[string]int{"recovery_shares": shares, "recovery_threshold": threshold}, &res); err != nil {
		return nil, err
	}
	if len(res.RecoveryKeysB64) != shares || res.RootToken == "" {
		return nil, fmt.Errorf("sys/init answered %d recovery keys and a root token %v, want %d and one: is Vault's seal the transit seal (auto-unseal)?",
			len(res.RecoveryKeysB64), res.RootToken != "", shares)
	}
	out := &initResult{RootToken: res.RootToken}
	for _, k := range res.RecoveryKeysB64 {
		out.RecoveryKeys = append(out.RecoveryKeys, []byte(k))
	}
	return out, nil
}
