package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/enclave/orchestrator"
)

// The supervisor's socket API, for the probes and `cloister-enclave
// evidence` run in the pod.
const (
	PathStarted  = "/started"
	PathReady    = "/ready"
	PathEvidence = "/evidence"
)

// Handler serves the probes (200 or 503 with the finding as text) and
// evidence.
func (s *Supervisor) Handler() http.Handler {
	mux := http.NewServeMux()
	probe := func(ok func(Health) bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			h := s.Health()
			code := http.StatusOK
			if !ok(h) {
				code = http.StatusServiceUnavailable
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(code)
			_, _ = fmt.Fprintln(w, h.Message)
		}
	}
	mux.HandleFunc("GET "+PathStarted, probe(func(h Health) bool { return h.Started }))
	mux.HandleFunc("GET "+PathReady, probe(func(h Health) bool { return h.Ready }))
	mux.HandleFunc("GET "+PathEvidence, func(w http.ResponseWriter, r *http.Request) {
		nonce := r.URL.Query().Get("nonce")
		if _, err := orchestrator.ParseNonce(nonce); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ev, err := s.Evidence(r.Context(), nonce)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set(orchestrator.HeaderEvidenceType, string(ev.Type))
		_, _ = w.Write(ev.Raw)
	})
	return mux
}

// Serve serves Handler on the unix socket path until ctx ends.
func (s *Supervisor) Serve(ctx context.Context, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Get asks the supervisor on socket for path: the status code and body.
func Get(ctx context.Context, socket, path string) (int, []byte, http.Header, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://supervisor"+path, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("asking the enclave supervisor: %w", err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, body, res.Header, err
}

func attestType(s string) attest.Type {
	t, err := attest.ParseType(strings.TrimSpace(s))
	if err != nil {
		return ""
	}
	return t
}
