package las

import (
	"context"
	"errors"
	"sync"

	"github.com/cloister-cc/cloister/internal/las/aesm"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// DCAP quotes enclaves through the node's AESM: an enclave asks for the
// quoting enclave's target info, produces a REPORT targeted at it
// (EREPORT, inside the enclave), and LAS has the quoting enclave turn the
// REPORT into a DCAP quote. LAS cannot make a REPORT itself: what the
// quote says is what the enclave reported.
type DCAP struct {
	Client *aesm.Client

	mu  sync.Mutex
	key []byte
	err error
}

// errNotChecked is DCAP's state before its first check.
var errNotChecked = errors.New("aesm: not checked yet")

// Check asks AESM for its ECDSA key and the quoting enclave's target
// info, and remembers the result: LAS is ready only while both answer.
func (d *DCAP) Check(ctx context.Context) error {
	key, err := d.Client.ECDSAKey(ctx)
	if err == nil {
		_, err = d.Client.TargetInfo(ctx, key)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
	if err == nil {
		d.key = key
	}
	return err
}

// Err is the last check's result: nil when AESM answered.
func (d *DCAP) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil && d.key == nil {
		return errNotChecked
	}
	return d.err
}

// keyID is the ECDSA key found by the last check, or found now.
func (d *DCAP) keyID(ctx context.Context) ([]byte, error) {
	d.mu.Lock()
	key := d.key
	d.mu.Unlock()
	if key != nil {
		return key, nil
	}
	return d.Client.ECDSAKey(ctx)
}

// TargetInfo is the quoting enclave's TARGETINFO.
func (d *DCAP) TargetInfo(ctx context.Context) ([]byte, error) {
	key, err := d.keyID(ctx)
	if err != nil {
		return nil, err
	}
	return d.Client.TargetInfo(ctx, key)
}

// Quote turns a REPORT into a DCAP quote.
func (d *DCAP) Quote(ctx context.Context, report []byte) ([]byte, error) {
	key, err := d.keyID(ctx)
	if err != nil {
		return nil, err
	}
	return d.Client.Quote(ctx, key, report)
}

// checkOf names the LAS check an AESM error fails.
func checkOf(err error) string {
	switch aesm.ProblemOf(err) {
	case aesm.ProblemNoSocket:
		return laswire.CheckAESMSocket
	case aesm.ProblemNoECDSAKey:
		return laswire.CheckECDSAKey
	case aesm.ProblemNotRegistered:
		return laswire.CheckPlatformRegistration
	case aesm.ProblemNoDevice:
		return laswire.CheckSGXDevice
	}
	return laswire.CheckAESM
}
