package api

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"net/http"

	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

func (s *Server) publicKey(w http.ResponseWriter, _ *http.Request) {
	state, why := s.CAS.Status()
	out := wire.PublicKey{Identity: s.Identity, State: string(state), StateReason: why}
	if s.Evidence != nil {
		ev, err := s.Evidence()
		if err != nil {
			fail(w, fmt.Errorf("making CAS's evidence: %w", err))
			return
		}
		out.Evidence = ev
	}
	if s.SimulationKeys != nil {
		keys, err := s.SimulationKeys()
		if err != nil {
			fail(w, fmt.Errorf("reading the pinned simulation keys: %w", err))
			return
		}
		out.SimulationKeys = keys
	}
	if s.Collateral != nil {
		out.Collateral = s.Collateral()
	}
	if s.Endorsements != nil {
		out.Endorsements = s.Endorsements()
	}
	if key, err := s.CAS.EncryptionKey(); err == nil {
		out.EncryptionKey = key
	}
	out.StateMark, out.StateProblem = s.CAS.StateMark()
	if board, err := s.CAS.Board(); err == nil {
		out.Board, out.BoardThreshold, out.BoardVersion = board.Keys, board.Threshold, board.Version
	}
	writeJSON(w, http.StatusOK, out)
}

// cas is GET /v1/ca: wire.CAs.
func (s *Server) cas(w http.ResponseWriter, _ *http.Request) {
	cas, err := s.CAS.CAs()
	respond(w, cas, err)
}

// respond writes v, or core's error.
func respond[T any](w http.ResponseWriter, v T, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	var req wire.InitRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	owners, err := publicKeys("recoveryOwners", req.RecoveryOwners)
	if err != nil {
		fail(w, err)
		return
	}
	board, err := publicKeys("board", req.Board)
	if err != nil {
		fail(w, err)
		return
	}
	shares, err := s.CAS.InitWith(core.InitRequest{Owners: owners, Threshold: req.Threshold, Token: req.Token, Board: board, BoardThreshold: req.BoardThreshold, Approvals: req.Approvals})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, shares)
}

// publicKeys parses the PEM keys of a request's field.
func publicKeys(field string, pems []string) ([]*ecdsa.PublicKey, error) {
	out := make([]*ecdsa.PublicKey, 0, len(pems))
	for i, p := range pems {
		k, err := policy.ParsePublicKey([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d]: %w", core.ErrInvalid, field, i, err)
		}
		out = append(out, k)
	}
	return out, nil
}

func (s *Server) recover(w http.ResponseWriter, r *http.Request) {
	var req wire.RecoverRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	if s.ReadyPeers != nil && !req.Force {
		if peers, err := s.ReadyPeers(r.Context()); err == nil && len(peers) > 0 {
			fail(w, fmt.Errorf("%w: %d ready replicas of this CAS hand it the seed, attested, with no owner acting: wait for them; submit shares only if they cannot (cloister cas recover --force)", core.ErrConflict, len(peers)))
			return
		}
	}
	need, err := s.CAS.Recover(req.Share, req.Accept)
	if err != nil {
		fail(w, err)
		return
	}
	state, _ := s.CAS.Status()
	writeJSON(w, http.StatusOK, wire.RecoverResponse{Needed: need, State: string(state)})
}

// peerSeed is POST /v1/peer/seed: a replica of this CAS, attested, gets
// the root seed sealed to the key its evidence binds.
func (s *Server) peerSeed(w http.ResponseWriter, r *http.Request) {
	if s.PeerSeed == nil {
		writeError(w, http.StatusNotFound, wire.ReasonNotFound, errors.New("this CAS hands its seed to no peer (it runs without replicas)"))
		return
	}
	var req wire.PeerSeedRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	res, err := s.PeerSeed(&req)
	respond(w, res, err)
}

// changeBoard is POST /v1/board: the board's next keys, signed by a
// majority of the current board.
func (s *Server) changeBoard(w http.ResponseWriter, r *http.Request) {
	var req wire.BoardChange
	if !decode(w, r, maxBody, &req) {
		return
	}
	board, err := s.CAS.ChangeBoard(&req)
	respond(w, wire.Board{Board: board.Keys, Threshold: board.Threshold, Version: board.Version}, err)
}

func (s *Server) registerPolicy(w http.ResponseWriter, r *http.Request) {
	var req wire.PolicyRequest
	if !decode(w, r, maxPolicyBody, &req) {
		return
	}
	var reg *wire.Registration
	var err error
	switch {
	case req.EncryptionKey != "" && len(req.Signatures) > 0:
		err = fmt.Errorf("%w: an encrypted policy carries its signatures inside: send encryptionKey or signatures, not both", core.ErrInvalid)
	case req.EncryptionKey != "" && req.Link != (policy.Link{}):
		err = fmt.Errorf("%w: an encrypted policy carries its version inside: send encryptionKey or version, not both", core.ErrInvalid)
	case req.EncryptionKey != "":
		reg, err = s.CAS.RegisterEncrypted(&policy.Encrypted{Policy: req.Policy, EncryptionKey: req.EncryptionKey}, req.Namespace)
	default:
		reg, err = s.CAS.RegisterWithin(&policy.Signed{Policy: req.Policy, Link: req.Link, Signatures: req.Signatures}, req.Namespace)
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

// getPolicy is the current version's public record: the document only
// if its read access is "any".
func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	rec, err := s.CAS.Policy(r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec.Public())
}

// history is every version's public record.
func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	recs, err := s.CAS.History(r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	for i := range recs {
		recs[i] = recs[i].Public()
	}
	s.writeHistory(w, recs)
}

func (s *Server) challenge(w http.ResponseWriter, _ *http.Request) {
	ch, err := s.CAS.Challenge()
	respond(w, ch, err)
}

// ownerRead is the history with its documents, for an owner's signed
// request.
func (s *Server) ownerRead(w http.ResponseWriter, r *http.Request) {
	var req wire.ReadRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	recs, err := s.CAS.OwnerHistory(r.PathValue("name"), req)
	if err != nil {
		fail(w, err)
		return
	}
	s.writeHistory(w, recs)
}

func (s *Server) writeHistory(w http.ResponseWriter, recs []wire.Record) {
	key, err := s.CAS.HistoryKey()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.History{Records: recs, HistoryKey: string(policy.MarshalPublicKey(key))})
}

func (s *Server) attest(w http.ResponseWriter, r *http.Request) {
	var req wire.AttestRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	res, err := s.CAS.Attest(&req)
	respond(w, res, err)
}

// The transparency log, read-only to anyone: its key (over a connection
// the client trusts by CAS's evidence), its checkpoint, its tiles.
func (s *Server) logKey(w http.ResponseWriter, _ *http.Request) {
	key, origin, err := s.CAS.LogKey()
	respond(w, &wire.LogKey{Origin: origin, Key: key}, err)
}

func (s *Server) logCheckpoint(w http.ResponseWriter, _ *http.Request) {
	cp, err := s.CAS.LogCheckpoint()
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(cp)
}

func (s *Server) logTile(w http.ResponseWriter, r *http.Request) {
	tile, err := s.CAS.LogTile("tile/" + r.PathValue("path"))
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(tile) //nolint:gosec // binary tile data as octet-stream, never sniffed as HTML
}
