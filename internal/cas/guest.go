package cas

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// guestTimeout bounds CAS's wait for its VM's evidence at start.
const guestTimeout = time.Minute

// guestEvidence is this confidential VM's evidence binding CAS's TLS key
// (report data: the key's binding, as clients check it). It is made once:
// the key lives as long as the process, and a client checks the key it
// sees on its own connection against it.
func guestEvidence(ctx context.Context, paths produce.Paths, tlsKey crypto.PublicKey) (*attest.Evidence, error) {
	binding, err := wire.KeyBinding(tlsKey)
	if err != nil {
		return nil, err
	}
	return guestEvidenceOver(ctx, paths, binding)
}

// guestEvidenceOver is this confidential VM's evidence over report data.
func guestEvidenceOver(ctx context.Context, paths produce.Paths, binding []byte) (*attest.Evidence, error) {
	ctx, cancel := context.WithTimeout(ctx, guestTimeout)
	defer cancel()
	p, err := produce.Detect(ctx, paths)
	if err != nil {
		return nil, err
	}
	if t := p.Type(); t != attest.SNP && t != attest.TDX && t != attest.SGX {
		return nil, fmt.Errorf("this machine makes %s evidence: CAS runs in an SEV-SNP or TDX confidential VM, or an SGX enclave (Gramine)", t)
	}
	ev, err := p.Quote(ctx, binding)
	if err != nil {
		return nil, err
	}
	return &ev, nil
}

// loadTestRoots reads --insecure-test-roots, saying it is insecure.
func loadTestRoots(file string, log *slog.Logger) ([]*x509.Certificate, error) {
	if file == "" {
		return nil, nil
	}
	roots, err := verify.LoadTestRoots(file)
	if err != nil {
		return nil, fmt.Errorf("--insecure-test-roots: %w", err)
	}
	log.Warn("INSECURE: workload evidence that chains to these test roots is taken, though no vendor vouches for it (tests and fake confidential VMs only)", "testRoots", len(roots), "file", file)
	return roots, nil
}
