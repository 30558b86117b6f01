// Package las is the local attestation service that runs on every SGX
// node: it has the node's quoting enclave (through AESM, dcap.go) quote
// the REPORTs of enclaves on its node, or in simulation hands out
// simulated evidence of their report data; and it keeps checking that
// unprivileged enclaves can open the SGX device and that AESM answers,
// reporting "not ready" with the reason when they cannot (the "LAS
// Unhealthy" case).
//
// Its folder is the LAS subsystem; wire holds what a workload needs to
// reach LAS (its port, the requests) without linking the daemon, aesm the
// client of the node's AESM.
package las

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Probe checks the enclave device as an unprivileged workload would see
// it. LAS itself may run as root, for whom open always succeeds, so the
// permission bits for others are checked too (SGX workloads need 0666).
type Probe struct {
	DevRoot string

	mu  sync.Mutex
	err error
}

// Check probes now and remembers the result.
func (p *Probe) Check() error {
	err := p.check()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	return err
}

func (p *Probe) check() error {
	path := filepath.Join(p.DevRoot, "sgx_enclave")
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w (is the SGX driver loaded and /dev mounted into LAS?)", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o006 != 0o006 {
		return fmt.Errorf("%s has mode %04o: unprivileged enclaves cannot open it; make it 0666", path, perm)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	_ = f.Close()
	return nil
}

// Err is the last result: nil when ready.
func (p *Probe) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
