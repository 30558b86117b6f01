package api

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"

	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
)

// PublicKey is GET /v1/public-key.
type PublicKey struct {
	// EncryptionKey seals policies to this CAS (empty until it is ready).
	EncryptionKey string `json:"encryptionKey,omitempty"`
	Identity
	State string `json:"state"`
	// StateReason says why CAS is in its state (e.g. what recovery waits for).
	StateReason string `json:"stateReason,omitempty"`
}

func (s *Server) publicKey(w http.ResponseWriter, _ *http.Request) {
	state, why := s.CAS.Status()
	out := PublicKey{Identity: s.Identity, State: string(state), StateReason: why}
	if key, err := s.CAS.EncryptionKey(); err == nil {
		out.EncryptionKey = key
	}
	writeJSON(w, http.StatusOK, out)
}

// cas is GET /v1/ca: core.CAs.
func (s *Server) cas(w http.ResponseWriter, _ *http.Request) {
	cas, err := s.CAS.CAs()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cas)
}

// InitRequest is POST /v1/init.
type InitRequest struct {
	// RecoveryOwners are P-256 public keys (PEM), one share each.
	RecoveryOwners []string `json:"recoveryOwners"`
	Threshold      int      `json:"threshold"`
}

func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	var req InitRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	var owners []*ecdsa.PublicKey
	for i, o := range req.RecoveryOwners {
		k, err := policy.ParsePublicKey([]byte(o))
		if err != nil {
			fail(w, fmt.Errorf("%w: recoveryOwners[%d]: %v", core.ErrInvalid, i, err))
			return
		}
		owners = append(owners, k)
	}
	shares, err := s.CAS.Init(owners, req.Threshold)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, shares)
}

// RecoverRequest is POST /v1/recover: one owner's opened share.
type RecoverRequest struct {
	Share seed.Share `json:"share"`
}

// RecoverResponse says how many shares are still needed.
type RecoverResponse struct {
	Needed int    `json:"needed"`
	State  string `json:"state"`
}

func (s *Server) recover(w http.ResponseWriter, r *http.Request) {
	var req RecoverRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	need, err := s.CAS.Recover(req.Share)
	if err != nil {
		fail(w, err)
		return
	}
	state, _ := s.CAS.Status()
	writeJSON(w, http.StatusOK, RecoverResponse{Needed: need, State: string(state)})
}

// PolicyRequest is POST /v1/policies: the spec of a SignedPolicy
// (policy, signatures) or of an EncryptedPolicy (policy, encryptionKey).
type PolicyRequest struct {
	CASAddress    string             `json:"casAddress,omitempty"`
	Policy        string             `json:"policy"`
	Signatures    []policy.Signature `json:"signatures,omitempty"`
	EncryptionKey string             `json:"encryptionKey,omitempty"`
}

func (s *Server) registerPolicy(w http.ResponseWriter, r *http.Request) {
	var req PolicyRequest
	if !decode(w, r, maxPolicyBody, &req) {
		return
	}
	var reg *core.Registration
	var err error
	switch {
	case req.EncryptionKey != "" && len(req.Signatures) > 0:
		err = fmt.Errorf("%w: an encrypted policy carries its signatures inside: send encryptionKey or signatures, not both", core.ErrInvalid)
	case req.EncryptionKey != "":
		reg, err = s.CAS.RegisterEncrypted(&policy.Encrypted{Policy: req.Policy, EncryptionKey: req.EncryptionKey})
	default:
		reg, err = s.CAS.Register(&policy.Signed{Policy: req.Policy, Signatures: req.Signatures})
	}
	if err != nil {
		fail(w, err)
		return
	}
	code := http.StatusCreated
	if reg.Unchanged {
		code = http.StatusOK
	}
	writeJSON(w, code, reg)
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	rec, err := s.CAS.Policy(r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// History is GET /v1/policies/{name}/history: the records, oldest first,
// and the key they are signed with (PEM).
type History struct {
	Records    []core.Record `json:"records"`
	HistoryKey string        `json:"historyKey"`
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	recs, err := s.CAS.History(r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	key, err := s.CAS.HistoryKey()
	if err != nil {
		fail(w, err)
		return
	}
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, History{Records: recs, HistoryKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))})
}

func (s *Server) attest(w http.ResponseWriter, r *http.Request) {
	var req core.AttestRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	res, err := s.CAS.Attest(&req)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
