package lasd

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
)

// DefaultPort is seed 001's LAS hostPort; DefaultProbeInterval how often
// the SGX device is checked.
const (
	DefaultPort          = 18766
	DefaultProbeInterval = 10 * time.Second
)

// maxRequest bounds a request body: report data is 64 bytes.
const maxRequest = 4 << 10

// Server is LAS's HTTP API.
type Server struct {
	Probe *Probe
	// SimKey signs simulated evidence; nil means no simulation, and
	// without a platform quoting service LAS cannot produce evidence.
	SimKey *ecdsa.PrivateKey
	// Validity of the evidence it issues.
	Validity time.Duration
	Now      func() time.Time
}

// EvidenceRequest is what an enclave asks for.
type EvidenceRequest struct {
	// ReportData (hex, up to 64 bytes) is bound into the evidence, e.g.
	// the SHA-256 of the key of the CSR the enclave will send to CAS.
	ReportData attest.Bytes `json:"reportData"`
}

// EvidenceResponse carries the evidence, ready for attestation.
type EvidenceResponse struct {
	Type     attest.Type `json:"type"`
	Evidence []byte      `json:"evidence"` // base64 in JSON
}

// Handler serves POST /v1/evidence, GET /v1/simulation-key, /healthz and
// /readyz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/evidence", s.evidence)
	mux.HandleFunc("GET /v1/simulation-key", s.simulationKey)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Probe.Err(); err != nil {
			http.Error(w, "SGX device check failed: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func (s *Server) evidence(w http.ResponseWriter, r *http.Request) {
	var req EvidenceRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w; send {\"reportData\": \"<hex, up to 64 bytes>\"}", err))
		return
	}
	if len(req.ReportData) > 64 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("reportData is %d bytes: at most 64", len(req.ReportData)))
		return
	}
	if s.SimKey == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this LAS has no quoting service and simulation is off (--simulation)"))
		return
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	validity := s.Validity
	if validity == 0 {
		validity = 10 * time.Minute
	}
	raw, err := sim.Generate(s.SimKey, attest.Claims{TCBStatus: attest.TCBUpToDate, ReportData: req.ReportData}, now(), validity)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(EvidenceResponse{Type: attest.Sim, Evidence: raw})
}

// simulationKey publishes the public key of the simulated evidence, so a
// verifier can pin the cluster's LAS keys.
func (s *Server) simulationKey(w http.ResponseWriter, _ *http.Request) {
	if s.SimKey == nil {
		writeError(w, http.StatusNotFound, errors.New("simulation is off"))
		return
	}
	der, err := x509.MarshalPKIXPublicKey(&s.SimKey.PublicKey)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	_ = pem.Encode(w, &pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}
