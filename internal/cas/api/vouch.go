package api

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// vouch is POST /v1/evidence: CAS's statement over the client's nonce,
// signed with its TLS key, with the evidence that binds that key. It
// relies on no TLS channel, so a client behind a TLS-terminating proxy
// verifies which CAS answers. The TLS key signs, not a fresh hardware
// quote per request: the quote binds the key once, the signature binds
// the nonce, and no client can make CAS's TEE quote at will.
func (s *Server) vouch(w http.ResponseWriter, r *http.Request) {
	var req wire.EvidenceRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	if err := wire.CheckNonce(req.Nonce); err != nil {
		writeError(w, http.StatusBadRequest, wire.ReasonInvalid, err)
		return
	}
	if s.TLSKey == nil || s.Evidence == nil {
		writeError(w, http.StatusNotFound, wire.ReasonNotFound, errors.New("CAS offers no evidence for its TLS key (it runs without a TEE and without simulation): pin its certificate instead"))
		return
	}
	st, err := s.statement(req.Nonce)
	if err != nil {
		fail(w, err)
		return
	}
	raw, err := json.Marshal(st)
	if err != nil {
		fail(w, err)
		return
	}
	h := sha256.Sum256(raw)
	sig, err := s.TLSKey.Sign(rand.Reader, h[:], crypto.SHA256)
	if err != nil {
		fail(w, fmt.Errorf("signing the statement: %w", err))
		return
	}
	out := wire.Vouched{Statement: raw, Signature: sig, Identity: s.Identity}
	if out.Evidence, err = s.Evidence(); err != nil {
		fail(w, fmt.Errorf("making CAS's evidence: %w", err))
		return
	}
	if s.Endorsements != nil {
		out.Endorsements = s.Endorsements()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// statement is what CAS says of itself now, over nonce.
func (s *Server) statement(nonce []byte) (*wire.Statement, error) {
	der, err := x509.MarshalPKIXPublicKey(s.TLSKey.Public())
	if err != nil {
		return nil, err
	}
	state, _ := s.CAS.Status()
	st := &wire.Statement{Type: wire.StatementType, Nonce: nonce, Time: time.Now().UTC(), TLSKey: der, State: string(state)}
	if state != wire.Ready {
		return st, nil
	}
	if st.EncryptionKey, err = s.CAS.EncryptionKey(); err != nil {
		return nil, err
	}
	hk, err := s.CAS.HistoryKey()
	if err != nil {
		return nil, err
	}
	st.HistoryKey = string(policy.MarshalPublicKey(hk))
	if st.CAs, err = s.CAS.CAs(); err != nil {
		return nil, err
	}
	key, origin, err := s.CAS.LogKey()
	if err != nil {
		return nil, err
	}
	st.Log = &wire.LogKey{Origin: origin, Key: key}
	cp, err := s.CAS.LogCheckpoint()
	if err != nil {
		return nil, err
	}
	st.Checkpoint = string(cp)
	return st, nil
}
