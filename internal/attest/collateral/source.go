package collateral

import (
	"context"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// IntelFetcher fetches Intel collateral for a platform.
type IntelFetcher interface {
	Fetch(ctx context.Context, tee, fmspc, ca string) (intelpcs.Collateral, error)
}

// Direct is a source that fetches on every verification, each fetch
// bounded by Timeout (30 s when zero): for one-off verifications, such as
// the CLI's.
type Direct struct {
	Intel   IntelFetcher
	AMD     AMDFetcher
	Timeout time.Duration
}

// Collateral implements intelpcs.Source.
func (d Direct) Collateral(tee, fmspc, ca string) (intelpcs.Collateral, error) {
	ctx, cancel := d.context()
	defer cancel()
	return d.Intel.Fetch(ctx, tee, fmspc, ca)
}

// VCEK implements snp.Source.
func (d Direct) VCEK(line string, chipID []byte, tcb uint64) ([]byte, error) {
	ctx, cancel := d.context()
	defer cancel()
	return d.AMD.VCEK(ctx, line, chipID, tcb)
}

// CRL implements snp.Source.
func (d Direct) CRL(line, signer string) ([]byte, error) {
	ctx, cancel := d.context()
	defer cancel()
	return d.AMD.CRL(ctx, line, signer)
}

func (d Direct) context() (context.Context, context.CancelFunc) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return context.WithTimeout(context.Background(), timeout)
}
