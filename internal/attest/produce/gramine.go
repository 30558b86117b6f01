package produce

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
)

// DefaultGramine is Gramine's attestation interface inside an SGX
// enclave: pseudo-files the LibOS answers from the enclave itself.
const DefaultGramine = "/dev/attestation"

// Sizes of what Gramine's /dev/attestation takes and gives.
const (
	sgxTargetInfoSize = 512
	sgxReportSize     = 432
	// maxSGXQuote bounds a quote read: about 5 KiB with its PCK chain.
	maxSGXQuote = 64 << 10
	// Offsets of the report data in a REPORT, and in a v3 quote (after
	// its 48-byte header).
	reportDataInReport = 320
	reportDataInQuote  = 48 + 320
)

// ReportQuoter turns an SGX REPORT into a quote: the node's LAS, which
// has its quoting enclave sign it through AESM.
type ReportQuoter interface {
	TargetInfo(ctx context.Context) ([]byte, error)
	QuoteReport(ctx context.Context, report []byte) (attest.Evidence, error)
}

// Gramine makes SGX evidence from inside a Gramine enclave, through
// /dev/attestation: with remote attestation on in the manifest
// (sgx.remote_attestation = "dcap") Gramine asks AESM for the quote
// itself; otherwise the enclave makes a REPORT targeted at the node's
// quoting enclave, which LAS quotes. Either way the enclave binds the
// report data: nothing outside it can make a REPORT.
type Gramine struct {
	Dir string
	// LAS quotes REPORTs where Gramine cannot quote; nil: none.
	LAS ReportQuoter
}

// Type implements Producer.
func (*Gramine) Type() attest.Type { return attest.SGX }

// ErrNoRemoteAttestation: Gramine does not quote (its manifest has no
// remote attestation) and no LAS was given to quote its REPORT.
var ErrNoRemoteAttestation = errors.New(`gramine's remote attestation is off: set sgx.remote_attestation = "dcap" in the manifest, or give the node's LAS to quote the enclave's REPORT`)

// Quote implements Producer.
func (g *Gramine) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	rd, err := pad(reportData)
	if err != nil {
		return attest.Evidence{}, err
	}
	kind, err := g.read("attestation_type", 16)
	if err != nil {
		return attest.Evidence{}, err
	}
	if string(bytes.TrimSpace(kind)) == "dcap" {
		if err := g.write("user_report_data", rd[:]); err != nil {
			return attest.Evidence{}, err
		}
		quote, err := g.read("quote", maxSGXQuote)
		if err != nil {
			return attest.Evidence{}, err
		}
		if quote, err = sgx.TrimQuote(quote); err != nil {
			return attest.Evidence{}, fmt.Errorf("gramine: %s/quote: %w", g.Dir, err)
		}
		return attest.Evidence{Type: attest.SGX, Raw: quote}, checkQuoteBound(quote, rd[:])
	}
	if g.LAS == nil {
		return attest.Evidence{}, fmt.Errorf("%s/attestation_type is %q: %w", g.Dir, bytes.TrimSpace(kind), ErrNoRemoteAttestation)
	}
	ti, err := g.LAS.TargetInfo(ctx)
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("the quoting enclave's target info: %w", err)
	}
	if len(ti) != sgxTargetInfoSize {
		return attest.Evidence{}, fmt.Errorf("the quoting enclave's target info has %d bytes, want %d", len(ti), sgxTargetInfoSize)
	}
	if err := g.write("target_info", ti); err != nil {
		return attest.Evidence{}, err
	}
	if err := g.write("user_report_data", rd[:]); err != nil {
		return attest.Evidence{}, err
	}
	report, err := g.read("report", sgxReportSize)
	if err != nil {
		return attest.Evidence{}, err
	}
	if len(report) != sgxReportSize {
		return attest.Evidence{}, fmt.Errorf("%s/report has %d bytes, an SGX REPORT %d", g.Dir, len(report), sgxReportSize)
	}
	if err := checkBound(attest.SGX, report[reportDataInReport:reportDataInReport+ReportDataSize], rd[:]); err != nil {
		return attest.Evidence{}, err
	}
	ev, err := g.LAS.QuoteReport(ctx, report)
	if err != nil {
		return attest.Evidence{}, err
	}
	return ev, checkQuoteBound(ev.Raw, rd[:])
}

// checkQuoteBound refuses a quote whose enclave report data is not want.
func checkQuoteBound(quote, want []byte) error {
	if len(quote) < reportDataInQuote+ReportDataSize {
		return fmt.Errorf("sgx: a quote of %d bytes is too short to carry report data", len(quote))
	}
	return checkBound(attest.SGX, quote[reportDataInQuote:reportDataInQuote+ReportDataSize], want)
}

// write writes one of Gramine's pseudo-files whole, in one write, as
// Gramine requires.
func (g *Gramine) write(name string, data []byte) error {
	f, err := os.OpenFile(filepath.Join(g.Dir, name), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("gramine: %w", err)
	}
	n, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("gramine: writing %s/%s: %w", g.Dir, name, err)
	}
	return nil
}

// read reads one of Gramine's pseudo-files, at most limit bytes.
func (g *Gramine) read(name string, limit int64) ([]byte, error) {
	f, err := os.Open(filepath.Join(g.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("gramine: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("gramine: reading %s/%s: %w", g.Dir, name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("gramine: %s/%s has more than %d bytes", g.Dir, name, limit)
	}
	return b, nil
}

// Gramine's sealing keys (keys/_sgx_mrenclave, keys/_sgx_mrsigner): EGETKEY's
// seal key for the enclave's MRENCLAVE, or for its MRSIGNER (every
// enclave of the signer, later versions included, derives it).
const (
	SealToMRENCLAVE = "_sgx_mrenclave"
	SealToMRSIGNER  = "_sgx_mrsigner"
)

// SealingKey is a 32-byte key from one of Gramine's 16-byte sealing keys
// (SealToMRENCLAVE, SealToMRSIGNER), expanded with HKDF-SHA256 for this
// one use, so it opens nothing else sealed under the enclave's key.
func (g *Gramine) SealingKey(which string) ([]byte, error) {
	if which != SealToMRENCLAVE && which != SealToMRSIGNER {
		return nil, fmt.Errorf("gramine sealing key %q: use %s or %s", which, SealToMRENCLAVE, SealToMRSIGNER)
	}
	k, err := g.read(filepath.Join("keys", which), 16)
	if err != nil {
		return nil, err
	}
	if len(k) != 16 {
		return nil, fmt.Errorf("gramine: %s/keys/%s has %d bytes, a sealing key 16", g.Dir, which, len(k))
	}
	return hkdf.Key(sha256.New, k, nil, "cloister sealed seed "+which, 32)
}
