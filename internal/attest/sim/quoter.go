package sim

import (
	"context"
	"crypto/ecdsa"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Quoter signs simulated evidence with the node's key: always marked
// insecure, accepted only where a policy allows simulation.
type Quoter struct {
	Key *ecdsa.PrivateKey
	// Validity of the evidence; 10 minutes when zero.
	Validity time.Duration
	Now      func() time.Time
}

// Quote makes evidence binding reportData.
func (q *Quoter) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	return q.QuoteFor(reportData, nil)
}

// QuoteFor is Quote for a caller whose pod policy digest LAS vouches for
// (hostData; nil for none).
func (q *Quoter) QuoteFor(reportData, hostData []byte) (attest.Evidence, error) {
	now := time.Now
	if q.Now != nil {
		now = q.Now
	}
	validity := q.Validity
	if validity == 0 {
		validity = 10 * time.Minute
	}
	claims := attest.Claims{TCBStatus: attest.TCBUpToDate, ReportData: reportData}
	if hostData != nil {
		claims.Sim = &attest.SimIdentity{HostData: hostData}
	}
	raw, err := Generate(q.Key, claims, now(), validity)
	if err != nil {
		return attest.Evidence{}, err
	}
	return attest.Evidence{Type: attest.Sim, Raw: raw}, nil
}

// PublicKey is the key verifiers pin for this node's simulated evidence.
func (q *Quoter) PublicKey() *ecdsa.PublicKey { return &q.Key.PublicKey }
