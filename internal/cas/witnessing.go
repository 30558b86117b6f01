package cas

import (
	"context"
	"time"
)

const (
	// witnessRequestTimeout bounds one request to a witness.
	witnessRequestTimeout = 10 * time.Second
	// witnessRetry is how often CAS sends a checkpoint the witnesses
	// have not cosigned yet again.
	witnessRetry = 30 * time.Second
)

// witnessLoop sends what the witnesses have not cosigned yet again, until
// ctx ends: a registration's own round may have found a witness away.
func (d *daemon) witnessLoop(ctx context.Context) {
	t := time.NewTicker(witnessRetry)
	defer t.Stop()
	for {
		d.cas.Witness(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
