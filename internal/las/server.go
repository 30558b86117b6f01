package las

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// DefaultProbeInterval is how often the SGX device is checked.
const DefaultProbeInterval = 10 * time.Second

// maxRequest bounds a request body: report data is 64 bytes.
const maxRequest = 4 << 10

// Server is LAS's HTTP API.
type Server struct {
	Probe *Probe
	// Quoter makes evidence of report data (simulation); nil: LAS makes
	// none of report data alone.
	Quoter Quoter
	// DCAP quotes enclaves' REPORTs through the node's AESM; nil: none.
	DCAP *DCAP
	// Pods, in simulation, puts the calling pod's policy digest into the
	// evidence; nil: no pod identity.
	Pods PodFinder
	Log  *slog.Logger
}

// PodFinder finds the policy digest of the pod at an address.
type PodFinder interface {
	HostData(ctx context.Context, ip string) (digest []byte, pod string, err error)
}

// Handler serves POST /v1/evidence, GET /v1/sgx/target-info, POST
// /v1/sgx/quote, GET /v1/simulation-key, GET /v1/status, /healthz and
// /readyz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/evidence", s.evidence)
	mux.HandleFunc("GET /v1/sgx/target-info", s.targetInfo)
	mux.HandleFunc("POST /v1/sgx/quote", s.quoteReport)
	mux.HandleFunc("GET /v1/simulation-key", s.simulationKey)
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Status())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// Ready only when LAS can hand out evidence: a LAS that would answer
	// every workload 501 is not a LAS the LAS resource may call HEALTHY.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := s.Status(); !st.Ready {
			http.Error(w, st.Check+": "+st.Reason, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// Status says whether LAS can serve evidence now: it has a quoter, and
// unprivileged enclaves can open the SGX device.
func (s *Server) Status() laswire.Status {
	st := laswire.Status{Evidence: laswire.EvidenceNone}
	switch {
	case s.Quoter != nil:
		if _, ok := s.Quoter.(*sim.Quoter); ok {
			st.Evidence = laswire.EvidenceSimulated
		}
	case s.DCAP != nil:
		st.Evidence = laswire.EvidenceSGXDCAP
		if err := s.DCAP.Err(); err != nil {
			st.Check, st.Reason = checkOf(err), err.Error()
			return st
		}
	default:
		st.Check, st.Reason = laswire.CheckEvidence, laswire.NoEvidence
		return st
	}
	if err := s.Probe.Err(); err != nil {
		st.Check, st.Reason = laswire.CheckSGXDevice, "SGX device check failed: "+err.Error()
		return st
	}
	st.Ready = true
	return st
}

func (s *Server) evidence(w http.ResponseWriter, r *http.Request) {
	var req laswire.EvidenceRequest
	if err := strictjson.Decode(http.MaxBytesReader(w, r.Body, maxRequest), &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w; send {\"reportData\": \"<hex, up to 64 bytes>\"}", err))
		return
	}
	if len(req.ReportData) > 64 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("reportData is %d bytes: at most 64", len(req.ReportData)))
		return
	}
	if s.Quoter == nil && s.DCAP != nil {
		writeError(w, http.StatusConflict, errors.New(laswire.DCAPOnly))
		return
	}
	if s.Quoter == nil {
		writeError(w, http.StatusNotImplemented, errors.New(laswire.NoEvidence+" (--simulation)"))
		return
	}
	ev, err := s.quote(r, req.ReportData)
	if errors.Is(err, ErrPodDeparts) {
		writeError(w, http.StatusForbidden, err)
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("making evidence: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(laswire.EvidenceResponse{Type: ev.Type, Evidence: ev.Raw})
}

// targetInfo serves the quoting enclave's TARGETINFO.
func (s *Server) targetInfo(w http.ResponseWriter, r *http.Request) {
	if s.DCAP == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this LAS does not quote through AESM (simulation, or no AESM socket)"))
		return
	}
	ti, err := s.DCAP.TargetInfo(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(laswire.TargetInfoResponse{TargetInfo: ti})
}

// quoteReport has the node's quoting enclave quote an enclave's REPORT.
func (s *Server) quoteReport(w http.ResponseWriter, r *http.Request) {
	if s.DCAP == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this LAS does not quote through AESM (simulation, or no AESM socket)"))
		return
	}
	var req laswire.QuoteRequest
	if err := strictjson.Decode(http.MaxBytesReader(w, r.Body, maxRequest), &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w; send {\"report\": \"<base64 of the 432-byte REPORT>\"}", err))
		return
	}
	if len(req.Report) != aesm.ReportSize {
		writeError(w, http.StatusBadRequest, fmt.Errorf("report is %d bytes: an SGX REPORT has %d (EREPORT's output, targeted at /v1/sgx/target-info)", len(req.Report), aesm.ReportSize))
		return
	}
	q, err := s.DCAP.Quote(r.Context(), req.Report)
	if err != nil {
		s.log().Warn("quote refused", "reason", err.Error())
		writeError(w, http.StatusBadGateway, fmt.Errorf("quoting the report: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(laswire.EvidenceResponse{Type: attest.SGX, Evidence: q})
}

// quote makes evidence for the caller, naming its pod's policy when LAS
// knows pods.
func (s *Server) quote(r *http.Request, reportData []byte) (attest.Evidence, error) {
	sq, ok := s.Quoter.(*sim.Quoter)
	if s.Pods == nil || !ok {
		return s.Quoter.Quote(r.Context(), reportData)
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return attest.Evidence{}, err
	}
	hostData, pod, err := s.Pods.HostData(r.Context(), ip)
	if err != nil {
		s.log().Warn("evidence refused", "caller", ip, "pod", pod, "reason", err.Error())
		return attest.Evidence{}, err
	}
	if pod != "" {
		s.log().Info("evidence for a pod", "pod", pod, "policy", fmt.Sprintf("%x", hostData))
	}
	return sq.QuoteFor(reportData, hostData)
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// simulationKey publishes the public key of the simulated evidence, so a
// verifier can pin the cluster's LAS keys.
func (s *Server) simulationKey(w http.ResponseWriter, _ *http.Request) {
	q, ok := s.Quoter.(interface{ PublicKey() *ecdsa.PublicKey })
	if !ok {
		writeError(w, http.StatusNotFound, errors.New("simulation is off"))
		return
	}
	der, err := x509.MarshalPKIXPublicKey(q.PublicKey())
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
