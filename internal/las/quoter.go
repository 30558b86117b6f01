package las

import (
	"context"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Quoter produces evidence that binds report data alone: simulation.
// On hardware an enclave makes its own REPORT and LAS has the node's
// quoting enclave quote it (DCAP, dcap.go), so no quoter takes report
// data there.
type Quoter interface {
	Quote(ctx context.Context, reportData []byte) (attest.Evidence, error)
}
