package orchestrator

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// The orchestrator's API, which the pod's supervisor calls.
const (
	// PathManifest: PUT a manifest to apply it (409 when it needs a new
	// enclave).
	PathManifest = "/v1/manifest"
	// PathStatus: GET the enclave.Status.
	PathStatus = "/v1/status"
	// PathEvidence: GET evidence binding ?nonce=<hex>; the
	// HeaderEvidenceType header names its type.
	PathEvidence       = "/v1/evidence"
	HeaderEvidenceType = "Cloister-Evidence-Type"
	// PathLogs: GET the log as a logstream (?after=<seq> resumes), kept
	// open for what comes.
	PathLogs = "/v1/logs"
	// HeaderManifestSignature carries a PUT manifest's signature by its
	// owner (base64, manifest.Sign).
	HeaderManifestSignature = "Cloister-Manifest-Signature"
)

// maxManifest bounds a manifest's size: 32 plugins with their
// configuration fit many times over.
const maxManifest = 1 << 20

// Handler serves the API.
func (o *Orchestrator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+PathManifest, func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxManifest))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		m, err := manifest.Parse(data)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if o.ManifestKey != nil {
			if err := m.CheckSignature(r.Header.Get(HeaderManifestSignature), o.ManifestKey); err != nil {
				o.log().Warn("manifest refused", "manifest", m.ManifestDigest(), "error", err.Error())
				http.Error(w, err.Error()+": sign it with the owner's key (cloister enclave sign) into spec.manifestSignature", http.StatusForbidden)
				return
			}
		}
		switch err := o.Apply(r.Context(), m); {
		case errors.Is(err, ErrNewEnclave):
			http.Error(w, err.Error(), http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, o.Status())
	})
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, o.Status()) })
	mux.HandleFunc("GET "+PathEvidence, func(w http.ResponseWriter, r *http.Request) {
		nonce, err := ParseNonce(r.URL.Query().Get("nonce"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ev, err := o.Attest(nonce)
		writeEvidence(w, ev, err)
	})
	mux.HandleFunc("GET "+PathLogs, func(w http.ResponseWriter, r *http.Request) {
		if o.Logs == nil {
			http.Error(w, "this orchestrator keeps no log", http.StatusNotFound)
			return
		}
		var after uint64
		if a := r.URL.Query().Get("after"); a != "" {
			var err error
			if after, err = strconv.ParseUint(a, 10, 64); err != nil {
				http.Error(w, "after: give the number of the last line read", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		flush := func() {}
		if f, ok := w.(http.Flusher); ok {
			flush = f.Flush
		}
		w.WriteHeader(http.StatusOK)
		flush()
		_ = o.Logs.Follow(r.Context(), after, w, flush)
	})
	return mux
}

// PluginHandler serves the plugins inside the enclave (a unix socket
// only they reach): GET PathEvidence?nonce=<hex>&reportData=<hex> is
// evidence binding both, for a plugin's attestation at CAS (its CSR key's
// hash as the report data); the manifests are in its PCRs.
func (o *Orchestrator) PluginHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathEvidence, func(w http.ResponseWriter, r *http.Request) {
		nonce, err := ParseNonce(r.URL.Query().Get("nonce"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		data, err := parseHex("reportData", r.URL.Query().Get("reportData"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ev, err := o.AttestData(nonce, data)
		writeEvidence(w, ev, err)
	})
	return mux
}

// ParseNonce reads a hex nonce of 1 to MaxNonce bytes.
func ParseNonce(s string) ([]byte, error) { return parseHex("nonce", s) }

// parseHex reads field's hex value of 1 to MaxNonce bytes.
func parseHex(field, s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) == 0 || len(b) > MaxNonce {
		return nil, fmt.Errorf("%s %q: give 1 to %d bytes in hex", field, s, MaxNonce)
	}
	return b, nil
}

// writeEvidence answers with evidence, or why there is none.
func writeEvidence(w http.ResponseWriter, ev Evidence, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set(HeaderEvidenceType, string(ev.Type))
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(ev.Raw)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
