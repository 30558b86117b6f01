package api

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/transit"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// transit serves Vault's transit seal. Its client writes with PUT and no
// content type, and reads errors in Vault's shape; the service is the one
// its TLS client certificate names.
func (s *Server) transit(op core.TransitOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, transit.MaxRequest))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeVaultError(w, http.StatusRequestEntityTooLarge, wire.ReasonTooLarge, fmt.Errorf("request body over %d bytes", transit.MaxRequest))
			return
		case err != nil:
			writeVaultError(w, http.StatusBadRequest, wire.ReasonMalformed, fmt.Errorf("request body: %w", err))
			return
		}
		var leaf *x509.Certificate
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			leaf = r.TLS.PeerCertificates[0]
		}
		res, err := s.CAS.Transit(leaf, op, r.PathValue("key"), body)
		if err != nil {
			code, reason := status(err)
			writeVaultError(w, code, reason, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// writeVaultError answers as Vault does, so its client shows the reason.
func writeVaultError(w http.ResponseWriter, code int, reason string, err error) {
	writeJSON(w, code, transit.ErrorResponse{Errors: []string{reason + ": " + err.Error()}})
}
