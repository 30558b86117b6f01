package vaultinit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The bootstrap's environment, which the Vault's pod template sets (part
// of its pod policy, so the host cannot change it).
const (
	EnvVault      = "CLOISTER_VAULT"
	EnvOwners     = "CLOISTER_VAULT_OWNERS"
	EnvThreshold  = "CLOISTER_VAULT_THRESHOLD"
	EnvServerName = "CLOISTER_VAULT_SERVER_NAME"
	EnvAddr       = "CLOISTER_VAULT_ADDR"
	// EnvFirst names the pod that initialises Vault; EnvPodName is the
	// pod's own name (the downward API's).
	EnvFirst   = "CLOISTER_VAULT_FIRST"
	EnvPodName = "POD_NAME"
)

// Paths and names the Vault's pods and the operator share.
const (
	// RecoveryPath is where the bootstrap serves the recovery bundle.
	RecoveryPath = "/v1/cloister/recovery"
	// RecoveryFile is the bundle on the replica's claim.
	RecoveryFile = "cloister-recovery.json"
	// ClientsPolicy is the Vault policy of the attested workloads that
	// log in with their CAS certificate (auth/cert role ClientsRole).
	ClientsPolicy = "cloister-clients"
	ClientsRole   = "cloister"
	// KVMount is the KV engine (version 2) the clients' policy opens.
	KVMount = "secret"
)

// configureAttempts bounds the tries of configuring a Vault that just
// became active.
const configureAttempts = 30

// Config is one replica's bootstrap.
type Config struct {
	// Dir is the initializer's folder: the pod's certificate and CAs.
	Dir string
	// Vault names the Vault (NAMESPACE/NAME).
	Vault string
	// Addr is the replica's Vault API (127.0.0.1:PORT) and ServerName
	// the name its certificate has.
	Addr, ServerName string
	// First: this replica initialises Vault.
	First bool
	// Owners (PEM) get one recovery key each; Threshold of them make a
	// root token.
	Owners    []string
	Threshold int
	// DataDir is the replica's claim, where the bundle is kept.
	DataDir string
	// Listen is where the bundle is served (HTTPS with the pod's
	// certificate).
	Listen string
	// Poll is how often the local Vault is asked while it starts.
	Poll time.Duration
}

// ParseOwners splits concatenated PEM public keys.
func ParseOwners(s string) []string {
	var out []string
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		out = append(out, string(pem.EncodeToMemory(b)))
	}
}

// Run serves the recovery bundle and, on the first replica, initialises
// Vault once; it returns when ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if len(cfg.Owners) == 0 || cfg.Threshold < 1 || cfg.Threshold > len(cfg.Owners) {
		return fmt.Errorf("%s: %d owners, threshold %d: give the owners' PEM keys and a threshold of 1 to their number", EnvOwners, len(cfg.Owners), cfg.Threshold)
	}
	root, roots, cert, err := loadTLS(cfg.Dir)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveBundle(w, r, cfg.DataDir) }),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
		ReadHeaderTimeout: 5 * time.Second,
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	defer func() { _ = srv.Close() }()
	if cfg.First {
		if err := initialise(ctx, cfg, root, roots, &cert, log); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-served:
		return err
	}
}

// loadTLS reads the pod's CAS root (PEM and as a pool) and its own
// certificate.
func loadTLS(dir string) ([]byte, *x509.CertPool, tls.Certificate, error) {
	root, err := os.ReadFile(filepath.Join(dir, casclient.RootCAFile))
	if err != nil {
		return nil, nil, tls.Certificate{}, fmt.Errorf("CAS's root CA (the initializer's output): %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(root) {
		return nil, nil, tls.Certificate{}, errors.New("CAS's root CA: no certificate")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, casclient.CertChainFile), filepath.Join(dir, casclient.KeyFile))
	if err != nil {
		return nil, nil, tls.Certificate{}, fmt.Errorf("the pod's certificate: %w", err)
	}
	return root, roots, cert, nil
}

// serveBundle answers the recovery bundle: ciphertext only, so anyone
// may read it.
func serveBundle(w http.ResponseWriter, r *http.Request, dataDir string) {
	if r.Method != http.MethodGet || r.URL.Path != RecoveryPath {
		http.NotFound(w, r)
		return
	}
	data, err := os.ReadFile(filepath.Join(dataDir, RecoveryFile))
	if err != nil {
		http.Error(w, "no recovery bundle on this replica", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// initialise waits for the local Vault and, if it is not initialised,
// initialises it inside this TEE: the recovery keys leave it only sealed
// to the owners, and the root token only configures the login of the
// attested workloads before it is revoked.
func initialise(ctx context.Context, cfg Config, root []byte, roots *x509.CertPool, own *tls.Certificate, log *slog.Logger) error {
	v := newVaultAPI(cfg.Addr, cfg.ServerName, roots)
	h, err := waitFor(ctx, v, cfg.Poll, func(Health) bool { return true })
	if err != nil || h.Initialized {
		return err
	}
	res, err := v.init(ctx, len(cfg.Owners), cfg.Threshold)
	if err != nil {
		return err
	}
	bundle, err := SealRecovery(cfg.Vault, res.RecoveryKeys, cfg.Owners, cfg.Threshold)
	for _, k := range res.RecoveryKeys {
		clear(k)
	}
	if err != nil {
		return err
	}
	data, err := json.Marshal(bundle)
	if err != nil {
		return err
	}
	if _, err := atomicfile.WriteIfChanged(filepath.Join(cfg.DataDir, RecoveryFile), data, 0o600); err != nil {
		return fmt.Errorf("keeping the sealed recovery keys: %w", err)
	}
	log.Info("initialised Vault; its recovery keys are sealed to the owners", "owners", len(cfg.Owners), "threshold", cfg.Threshold)
	if _, err := waitFor(ctx, v, cfg.Poll, func(h Health) bool { return h.Initialized && !h.Sealed && !h.Standby }); err != nil {
		return err
	}
	v.token = res.RootToken
	defer func() { v.token = "" }()
	clients, err := clientsOf(own)
	if err != nil {
		return err
	}
	// Vault may drop the first connections as it becomes active: the
	// steps are idempotent, so they are tried again for a while.
	for attempt := 1; ; attempt++ {
		err := configure(ctx, v, string(root), clients)
		if err == nil {
			break
		}
		if attempt == configureAttempts || ctx.Err() != nil {
			// No root token outlives this process, configured or not: the
			// owners make a new one with their recovery keys.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if rerr := v.do(rctx, http.MethodPut, "/v1/auth/token/revoke-self", nil, nil); rerr != nil {
				return fmt.Errorf("configuring Vault with the root token: %w; revoking it: %w", err, rerr)
			}
			return fmt.Errorf("configuring Vault with the root token (now revoked): %w", err)
		}
		log.Warn("configuring Vault; trying again", "attempt", attempt, "reason", err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(max(cfg.Poll, 100*time.Millisecond)):
		}
	}
	if err := v.do(ctx, http.MethodPut, "/v1/auth/token/revoke-self", nil, nil); err != nil {
		return fmt.Errorf("revoking the root token: %w", err)
	}
	log.Info("configured the KV engine and the login of attested workloads; revoked the root token", "clients", clients)
	return nil
}

// waitFor asks the local Vault until it answers as ok wants.
func waitFor(ctx context.Context, v *API, every time.Duration, ok func(Health) bool) (Health, error) {
	t := time.NewTicker(max(every, 100*time.Millisecond))
	defer t.Stop()
	for {
		h, err := v.Health(ctx)
		if err == nil && ok(h) {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-t.C:
		}
	}
}

// clientsOf is the URI SAN pattern of the workloads that may log in: the
// attested services of the policies in the Vault's own namespace (its
// policy's namespace), under this CAS's trust domain.
func clientsOf(own *tls.Certificate) (string, error) {
	leaf, err := x509.ParseCertificate(own.Certificate[0])
	if err != nil {
		return "", err
	}
	id, err := wire.CertMeshID(leaf)
	if err != nil {
		return "", fmt.Errorf("the pod's certificate: %w", err)
	}
	ns := policy.Namespace(id.Policy)
	if ns == "" {
		return "", fmt.Errorf("the Vault's policy %s is in no namespace", id.Policy)
	}
	return "spiffe://" + id.TrustDomain + "/policy/" + ns + "/*", nil
}

// configure mounts the KV engine at secret/ and admits the clients'
// CAS certificates to it, idempotently.
func configure(ctx context.Context, v *API, root, clients string) error {
	if err := v.do(ctx, http.MethodPost, "/v1/sys/mounts/"+KVMount, map[string]any{"type": "kv", "options": map[string]string{"version": "2"}}, nil); err != nil && !errors.Is(err, errInUse) {
		return err
	}
	if err := v.do(ctx, http.MethodPost, "/v1/sys/auth/cert", map[string]any{"type": "cert"}, nil); err != nil && !errors.Is(err, errInUse) {
		return err
	}
	rules := `path "` + KVMount + `/*" { capabilities = ["create", "read", "update", "patch", "delete", "list"] }`
	if err := v.do(ctx, http.MethodPut, "/v1/sys/policies/acl/"+ClientsPolicy, map[string]string{"policy": rules}, nil); err != nil {
		return err
	}
	return v.do(ctx, http.MethodPost, "/v1/auth/cert/certs/"+ClientsRole, map[string]any{
		"certificate": root, "allowed_uri_sans": clients,
		"token_policies": ClientsPolicy, "token_ttl": "1h", "token_max_ttl": "24h",
	}, nil)
}
