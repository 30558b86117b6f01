package las

import (
	"context"
	"crypto/ecdsa"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
)

// Quoter produces evidence that binds report data; LAS serves whichever
// it is given.
//
// This is the extension point for real SGX quotes. A hardware quoter
// cannot take report data alone: the enclave itself must produce an SGX
// REPORT (EREPORT) targeted at the platform's quoting enclave, and the
// quoter then asks the node's AESM service (protobuf messages over its
// unix socket, /var/run/aesmd/aesm.socket: InitQuoteEx for the QE target
// info, GetQuoteEx for the quote) to turn that report into a DCAP quote.
// Such a quoter adds a target-info endpoint and takes a report instead of
// report data; the simulated quoter below needs neither.
type Quoter interface {
	Quote(ctx context.Context, reportData []byte) (attest.Evidence, error)
}

// SimQuoter signs simulated evidence with the node's key: always marked
// insecure, accepted only where a policy allows simulation.
type SimQuoter struct {
	Key *ecdsa.PrivateKey
	// Validity of the evidence; 10 minutes when zero.
	Validity time.Duration
	Now      func() time.Time
}

// Quote implements Quoter.
func (q *SimQuoter) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	return q.QuoteFor(reportData, nil)
}

// QuoteFor is Quote for a caller whose pod policy digest LAS vouches for
// (hostData; nil for none).
func (q *SimQuoter) QuoteFor(reportData, hostData []byte) (attest.Evidence, error) {
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
	raw, err := sim.Generate(q.Key, claims, now(), validity)
	if err != nil {
		return attest.Evidence{}, err
	}
	return attest.Evidence{Type: attest.Sim, Raw: raw}, nil
}

// PublicKey is the key verifiers pin for this node's simulated evidence.
func (q *SimQuoter) PublicKey() *ecdsa.PublicKey { return &q.Key.PublicKey }
