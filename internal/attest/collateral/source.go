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
	Fetcher IntelFetcher
	Timeout time.Duration
}

// Collateral implements intelpcs.Source.
func (d Direct) Collateral(tee, fmspc, ca string) (intelpcs.Collateral, error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.Fetcher.Fetch(ctx, tee, fmspc, ca)
}
