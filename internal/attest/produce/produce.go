// Package produce makes this machine's own attestation evidence: SEV-SNP
// and TDX inside a confidential VM through the kernel's configfs-tsm
// report interface (falling back to /dev/sev-guest and /dev/tdx_guest),
// Nitro through the enclave's Nitro Secure Module, and SGX inside a
// Gramine enclave through its /dev/attestation (gramine.go). Every producer
// binds the caller's report data and refuses what its platform returns
// unless that carries exactly the same report data, so a confused or
// compromised layer below cannot hand out evidence made for another
// request. Paths are the caller's, so tests and users point them at
// fakes or elsewhere.
package produce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cloister-cc/cloister/internal/attest"
)

// ReportDataSize is the size of SEV-SNP's and TDX's report data: shorter
// report data is padded with zeros.
const ReportDataSize = 64

// Producer makes evidence binding report data. It has the method set of
// the CAS client's Quoter, so a producer attests a workload directly.
type Producer interface {
	// Type is the evidence type it makes.
	Type() attest.Type
	// Quote makes evidence over reportData (at most 64 bytes).
	Quote(ctx context.Context, reportData []byte) (attest.Evidence, error)
}

// Paths are where the platform's interfaces are; empty fields take the
// Linux defaults.
type Paths struct {
	// TSM is configfs-tsm's root (its report folder is TSM/report).
	TSM string
	// SEVGuest and TDXGuest are the guest devices of the ioctl fallback.
	SEVGuest, TDXGuest string
	// NSM is the Nitro Secure Module's device.
	NSM string
	// Gramine is Gramine's /dev/attestation inside an SGX enclave.
	Gramine string
}

// The Linux defaults.
const (
	DefaultTSM      = "/sys/kernel/config/tsm"
	DefaultSEVGuest = "/dev/sev-guest"
	DefaultTDXGuest = "/dev/tdx_guest"
	DefaultNSM      = "/dev/nsm"
)

func (p Paths) withDefaults() Paths {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&p.TSM, DefaultTSM)
	def(&p.SEVGuest, DefaultSEVGuest)
	def(&p.TDXGuest, DefaultTDXGuest)
	def(&p.NSM, DefaultNSM)
	def(&p.Gramine, DefaultGramine)
	return p
}

// ErrNoTEE: none of the platform interfaces is there.
var ErrNoTEE = errors.New("no evidence producer on this machine")

// Detect finds the producer this machine offers: configfs-tsm first (the
// kernel's vendor-neutral interface), then the SEV-SNP and TDX guest
// devices, then the Nitro Secure Module, then Gramine's attestation
// interface inside an SGX enclave. The error says what was tried.
func Detect(ctx context.Context, p Paths) (Producer, error) {
	p = p.withDefaults()
	var tried []string
	tsm, err := OpenTSM(ctx, p.TSM)
	if err == nil {
		return tsm, nil
	}
	tried = append(tried, err.Error())
	for _, d := range []struct {
		path string
		make func(string) Producer
	}{
		{p.SEVGuest, func(path string) Producer { return &SEVGuest{Path: path} }},
		{p.TDXGuest, func(path string) Producer { return &TDXGuest{Path: path} }},
		{p.NSM, func(path string) Producer { return &Nitro{Path: path} }},
		{p.Gramine, func(path string) Producer { return &Gramine{Dir: path} }},
	} {
		if _, err := os.Stat(d.path); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return d.make(d.path), nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNoTEE, strings.Join(tried, "; "))
}

// pad makes report data the platform's 64 bytes.
func pad(reportData []byte) ([ReportDataSize]byte, error) {
	var out [ReportDataSize]byte
	if len(reportData) > ReportDataSize {
		return out, fmt.Errorf("report data is %d bytes: at most %d", len(reportData), ReportDataSize)
	}
	copy(out[:], reportData)
	return out, nil
}

// ErrReportDataDiffers: the platform returned evidence over other report
// data than asked for.
var ErrReportDataDiffers = errors.New("the platform returned evidence over other report data than requested")

// checkBound refuses evidence whose report data is not want.
func checkBound(t attest.Type, got []byte, want []byte) error {
	if string(got) != string(want) {
		return fmt.Errorf("%s: %w: got %x, want %x", t, ErrReportDataDiffers, got, want)
	}
	return nil
}
