package las

import (
	"context"

	"github.com/cloister-cc/cloister/internal/attest"
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
