package wire

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
)

// StatementType names what CAS's TLS key signs for POST /v1/evidence:
// no TLS handshake signs a message that starts as this JSON does.
const StatementType = "cloister.dev/cas-statement/v1"

// Nonce bounds, for POST /v1/evidence.
const (
	MinNonce = 16
	MaxNonce = 64
	// MaxStatement bounds a signed statement.
	MaxStatement = 64 << 10
)

// EvidenceRequest is POST /v1/evidence: a client's fresh nonce.
type EvidenceRequest struct {
	Nonce []byte `json:"nonce"`
}

// Statement is what CAS says of itself over a client's nonce, signed
// with its TLS key (which its evidence binds): who it is and what it
// signs with, so a client that reaches CAS through a TLS-terminating
// proxy, an ingress or a browser still knows which CAS answers and
// trusts what that CAS signs.
type Statement struct {
	Type  string    `json:"type"`
	Nonce []byte    `json:"nonce"`
	Time  time.Time `json:"time"`
	// TLSKey is the PKIX public key that signs this, the one CAS's
	// evidence binds (report data: KeyBinding).
	TLSKey []byte `json:"tlsKey"`
	State  string `json:"state"`
	// Once CAS is ready: the key policies are sealed to, the key its
	// histories are signed with (PEM), its CAs, and its transparency
	// log's key and checkpoint.
	EncryptionKey string  `json:"encryptionKey,omitempty"`
	HistoryKey    string  `json:"historyKey,omitempty"`
	CAs           *CAs    `json:"cas,omitempty"`
	Log           *LogKey `json:"log,omitempty"`
	Checkpoint    string  `json:"checkpoint,omitempty"`
}

// Vouched is POST /v1/evidence's answer: the statement as signed, the
// signature (ECDSA, ASN.1, over its SHA-256) and CAS's identity (its
// certificate, evidence binding the TLS key, endorsements).
type Vouched struct {
	Statement []byte `json:"statement"`
	Signature []byte `json:"signature"`
	Identity
}

// CheckNonce says why a nonce is not one a client should send.
func CheckNonce(n []byte) error {
	if len(n) < MinNonce || len(n) > MaxNonce {
		return fmt.Errorf("nonce: %d bytes, want %d to %d random bytes", len(n), MinNonce, MaxNonce)
	}
	return nil
}

// Open checks v's signature with the key the statement names, and that
// the statement answers nonce; the evidence that binds the key is the
// caller's to check (KeyBinding of the returned key).
func (v *Vouched) Open(nonce []byte) (*Statement, *ecdsa.PublicKey, error) {
	if len(v.Statement) > MaxStatement {
		return nil, nil, fmt.Errorf("statement: %d bytes, at most %d", len(v.Statement), MaxStatement)
	}
	var s Statement
	if err := strictjson.Unmarshal(v.Statement, &s); err != nil {
		return nil, nil, fmt.Errorf("statement: %w", err)
	}
	if s.Type != StatementType {
		return nil, nil, fmt.Errorf("statement: type %q, want %q", s.Type, StatementType)
	}
	pub, err := x509.ParsePKIXPublicKey(s.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("statement: tlsKey: %w", err)
	}
	key, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, nil, errors.New("statement: tlsKey is not an ECDSA key")
	}
	h := sha256.Sum256(v.Statement)
	if !ecdsa.VerifyASN1(key, h[:], v.Signature) {
		return nil, nil, errors.New("statement: the signature is not by the key it names")
	}
	if string(s.Nonce) != string(nonce) {
		return nil, nil, errors.New("statement: it answers another nonce (a replayed answer)")
	}
	return &s, key, nil
}
