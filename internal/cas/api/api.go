// Package api is CAS's HTTP edge: the JSON REST API under /v1, health,
// readiness and metrics. It decodes and bounds requests (size, content
// type, unknown fields, per-client concurrency), calls core, and maps
// core's errors to status codes with the reason.
package api

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/transit"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Request size limits: a policy is at most 1 MiB (its resource's limit),
// everything else far less.
const (
	maxPolicyBody = 2 << 20
	maxBody       = 256 << 10
)

// DefaultPerClient is how many requests one client address may have in
// flight.
const DefaultPerClient = 32

// DefaultMaxInFlight is how many requests CAS serves at once from all
// clients: each holds a goroutine, a body of up to a policy's size and,
// for an attestation, a verification's CPU.
const DefaultMaxInFlight = 256

// Server serves a CAS.
type Server struct {
	CAS *core.CAS
	// Identity is what GET /v1/public-key says of the CAS besides its
	// encryption key: its TLS certificate and evidence binding it.
	Identity wire.Identity
	// Evidence, when set, makes the evidence of Identity afresh for each
	// request (a simulated CAS signs its own).
	Evidence func() (*attest.Evidence, error)
	// TLSKey is the key of Identity's certificate: it signs the
	// statement of POST /v1/evidence, which Evidence binds.
	TLSKey crypto.Signer
	// SimulationKeys, when set, names the simulation keys whose workload
	// evidence CAS takes, so their owners can see what is pinned.
	SimulationKeys func() ([]string, error)
	// Collateral, when set, reports the vendor collateral cache's state.
	Collateral func() *wire.CollateralHealth
	// Endorsements, when set, gives the vendor collateral that judges the
	// evidence (Identity's), read afresh for each request.
	Endorsements func() *wire.Endorsements
	// PeerSeed, when set, answers a replica of this CAS that asks for the
	// root seed (POST /v1/peer/seed): it verifies the request's evidence
	// and seals the seed to the key it binds, or refuses.
	PeerSeed func(*wire.PeerSeedRequest) (*wire.PeerSeedResponse, error)
	// ReadyPeers, when set, lists the ready replicas of this CAS: while
	// there is one, an owner's share is refused unless forced.
	ReadyPeers func(context.Context) ([]string, error)
	// PerClient bounds concurrent requests per client address.
	PerClient int
	// MaxInFlight bounds concurrent requests from all clients together,
	// so that many addresses cannot exhaust CAS either; the probes and
	// metrics are always served.
	MaxInFlight int

	once     sync.Once
	mu       sync.Mutex
	inFlight map[string]int
	total    int
	draining atomic.Bool
}

// Handler is the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": version.Get().Version})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.CAS.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/public-key", s.publicKey)
	mux.HandleFunc("GET /v1/ca", s.cas)
	mux.HandleFunc("POST /v1/evidence", s.vouch)
	mux.HandleFunc("POST /v1/init", s.init)
	mux.HandleFunc("POST /v1/recover", s.recover)
	mux.HandleFunc("POST /v1/board", s.changeBoard)
	mux.HandleFunc("POST /v1/policies", s.registerPolicy)
	mux.HandleFunc("GET /v1/policies/{name}", s.getPolicy)
	mux.HandleFunc("GET /v1/policies/{name}/history", s.history)
	mux.HandleFunc("GET /v1/challenge", s.challenge)
	mux.HandleFunc("GET /v1/log/key", s.logKey)
	mux.HandleFunc("GET /v1/log/checkpoint", s.logCheckpoint)
	mux.HandleFunc("GET /v1/log/tile/{path...}", s.logTile)
	mux.HandleFunc("POST /v1/policies/{name}/read", s.ownerRead)
	mux.HandleFunc("POST /v1/attest", s.attest)
	mux.HandleFunc("POST /v1/peer/seed", s.peerSeed)
	for _, op := range []core.TransitOp{core.TransitEncrypt, core.TransitDecrypt} {
		for _, method := range []string{http.MethodPut, http.MethodPost} {
			mux.HandleFunc(method+" /v1/"+transit.Mount+"/"+string(op)+"/{key}", s.transit(op))
		}
	}
	// Anything else gets the API's JSON error, as every other refusal.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.ReasonNotFound, fmt.Errorf("no API %s %s: CAS serves the requests docs/security.md lists", r.Method, r.URL.EscapedPath()))
	})
	return s.limit(mux)
}

// unlimited are the paths the limits never refuse: the kubelet's probes
// and the metrics scrape, which must work most when CAS is busy.
var unlimited = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// limit refuses a client's requests beyond PerClient in flight, and
// anyone's beyond MaxInFlight.
func (s *Server) limit(next http.Handler) http.Handler {
	s.once.Do(func() {
		s.inFlight = map[string]int{}
		if s.PerClient == 0 {
			s.PerClient = DefaultPerClient
		}
		if s.MaxInFlight == 0 {
			s.MaxInFlight = DefaultMaxInFlight
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && unlimited[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		client, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			client = r.RemoteAddr
		}
		s.mu.Lock()
		var refused error
		switch {
		case s.inFlight[client] >= s.PerClient:
			refused = fmt.Errorf("more than %d requests in flight from %s", s.PerClient, client)
		case s.total >= s.MaxInFlight:
			refused = fmt.Errorf("CAS has %d requests in flight, its limit", s.MaxInFlight)
		}
		if refused != nil {
			s.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, wire.ReasonTooManyRequests, refused)
			return
		}
		s.inFlight[client]++
		s.total++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			if s.inFlight[client]--; s.inFlight[client] == 0 {
				delete(s.inFlight, client)
			}
			s.total--
			s.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// Drain makes the server report not ready from now on, while it goes on
// serving: CAS is stopping, and new clients are to choose another replica.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		http.Error(w, "stopping: CAS is shutting down", http.StatusServiceUnavailable)
		return
	}
	state, why := s.CAS.Status()
	if state != wire.Ready {
		http.Error(w, string(state)+": "+why, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// decode reads a JSON body: the right content type, within limit, no
// unknown fields, nothing after it.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, wire.ReasonContentType, fmt.Errorf("content type %q: send application/json", r.Header.Get("Content-Type")))
		return false
	}
	err := strictjson.Decode(http.MaxBytesReader(w, r.Body, limit), v)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, wire.ReasonTooLarge, fmt.Errorf("request body over %d bytes", limit))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, wire.ReasonMalformed, fmt.Errorf("request body: %w", err))
		return false
	}
	return true
}

// fail maps core's errors to status codes.
func fail(w http.ResponseWriter, err error) {
	code, reason := status(err)
	writeError(w, code, reason, err)
}

// status is the status code and reason of one of core's errors.
func status(err error) (int, string) {
	code, reason := http.StatusInternalServerError, wire.ReasonInternal
	switch {
	case errors.Is(err, core.ErrRejected):
		code, reason = http.StatusForbidden, string(attest.CheckOf(err))
	case errors.Is(err, core.ErrUnauthorized):
		code, reason = http.StatusForbidden, wire.ReasonUnauthorized
	case errors.Is(err, core.ErrConflict):
		code, reason = http.StatusConflict, wire.ReasonConflict
	case errors.Is(err, core.ErrSuperseded):
		code, reason = http.StatusConflict, wire.ReasonSuperseded
	case errors.Is(err, core.ErrQuota):
		code, reason = http.StatusForbidden, wire.ReasonQuota
	case errors.Is(err, core.ErrNameTaken):
		code, reason = http.StatusConflict, wire.ReasonNameTaken
	case errors.Is(err, core.ErrInvalid):
		code, reason = http.StatusBadRequest, wire.ReasonInvalid
	case errors.Is(err, core.ErrNotFound):
		code, reason = http.StatusNotFound, wire.ReasonNotFound
	case errors.Is(err, core.ErrInitialized):
		code, reason = http.StatusConflict, wire.ReasonInitialized
	case errors.Is(err, core.ErrNotInitialized):
		code, reason = http.StatusServiceUnavailable, wire.ReasonUninitialized
	case errors.Is(err, core.ErrRecovery):
		code, reason = http.StatusServiceUnavailable, wire.ReasonRecovery
	}
	return code, reason
}

func writeError(w http.ResponseWriter, code int, reason string, err error) {
	writeJSON(w, code, wire.Error{Error: err.Error(), Reason: reason})
}

// writeJSON answers v as JSON in one write with its length, not chunked.
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed","reason":"`+wire.ReasonInternal+`"}`)
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
