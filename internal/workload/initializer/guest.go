package initializer

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// detectTimeout bounds one look for the VM's evidence producer, and one
// quote.
const detectTimeout = 30 * time.Second

// guestQuoter is the pod's own confidential VM as the quoter: its
// evidence binds the CSR's key as LAS's would, with no node in between.
// The producer is looked for at the first quote, and again after a
// failure, so a VM whose interface appears late is retried like any wait.
type guestQuoter struct {
	paths produce.Paths
	log   *slog.Logger
	p     produce.Producer
}

func (g *guestQuoter) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	if g.p == nil {
		dctx, cancel := context.WithTimeout(ctx, detectTimeout)
		p, err := produce.Detect(dctx, g.paths)
		cancel()
		if err != nil {
			return attest.Evidence{}, fmt.Errorf("%s=%s: this pod's VM offers no evidence: %w", initenv.EnvEvidence, initenv.EvidenceGuest, err)
		}
		g.log.Info("attesting with this confidential VM's own evidence", "type", string(p.Type()))
		g.p = p
	}
	// A served folder whose server stopped would be waited for forever.
	qctx, cancel := context.WithTimeout(ctx, detectTimeout)
	defer cancel()
	return g.p.Quote(qctx, reportData)
}

// maxTestRoots bounds the PEM text of EnvInsecureTestRoots.
const maxTestRoots = 64 << 10

// parseTestRoots reads EnvInsecureTestRoots: PEM certificates.
func parseTestRoots(text string) ([]*x509.Certificate, error) {
	if len(text) > maxTestRoots {
		return nil, fmt.Errorf("%s is %d bytes: at most %d", initenv.EnvInsecureTestRoots, len(text), maxTestRoots)
	}
	roots, err := verify.ParseTestRoots([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", initenv.EnvInsecureTestRoots, err)
	}
	return roots, nil
}
