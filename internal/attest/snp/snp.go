// Package snp verifies AMD SEV-SNP attestation reports offline with
// go-sev-guest: the report's signature by the VCEK the caller supplies,
// and the VCEK's chain to AMD's ASK and ARK for the product, embedded in
// go-sev-guest.
package snp

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"time"

	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/google/go-sev-guest/verify"
	"github.com/google/go-sev-guest/verify/trust"

	"github.com/cloister-cc/cloister/internal/attest"
)

// policyDebug is guest policy bit 19: the host may debug the guest.
const policyDebug = 1 << 19

// Options of a verification.
type Options struct {
	At time.Time
	// VCEK is the chip's endorsement key certificate (DER or PEM).
	VCEK []byte
}

// Verify checks a raw report and returns its claims (with those read so
// far on a rejection).
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("snp: a verification time is required")
	}
	switch {
	case len(raw) < abi.ReportSize:
		return nil, attest.Reject(attest.CheckFormat, "truncated report: %d bytes, want %d", len(raw), abi.ReportSize)
	case len(raw) > abi.ReportSize:
		return nil, attest.Reject(attest.CheckFormat, "%d trailing bytes after the report", len(raw)-abi.ReportSize)
	}
	report, err := abi.ReportToProto(raw)
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "SEV-SNP report: %v", err)
	}
	claims := &attest.Claims{
		Type:       attest.SNP,
		Debug:      report.GetPolicy()&policyDebug != 0,
		ReportData: report.GetReportData(),
		SNP: &attest.SNPIdentity{
			Measurement: report.GetMeasurement(),
			HostData:    report.GetHostData(),
			GuestPolicy: report.GetPolicy(),
			ReportedTCB: report.GetReportedTcb(),
		},
	}
	vcek := opts.VCEK
	if block, _ := pem.Decode(vcek); block != nil {
		vcek = block.Bytes
	}
	if len(vcek) == 0 {
		return claims, attest.Reject(attest.CheckCollateral, "SEV-SNP evidence needs the chip's VCEK certificate (--collateral DIR with *vcek*, DER or PEM)")
	}
	cert, err := x509.ParseCertificate(vcek)
	if err != nil {
		return claims, attest.Reject(attest.CheckFormat, "VCEK certificate: %v", err)
	}
	// The VCEK's issuer names the product line (SEV-Milan, SEV-Genoa,
	// SEV-Turin) whose embedded ASK and ARK must certify it.
	line := strings.TrimPrefix(cert.Issuer.CommonName, "SEV-")
	claims.SNP.TCB = tcbParts(line, report.GetReportedTcb())
	roots, ok := trust.DefaultRootCerts[line]
	if !ok || roots.ProductCerts == nil {
		return claims, attest.Reject(attest.CheckChain, "the VCEK is issued by %q: no AMD root for product line %q", cert.Issuer.CommonName, line)
	}
	err = verify.SnpAttestation(&spb.Attestation{Report: report, CertificateChain: &spb.CertificateChain{
		VcekCert: vcek, AskCert: roots.ProductCerts.Ask.Raw, ArkCert: roots.ProductCerts.Ark.Raw,
	}}, &verify.Options{DisableCertFetching: true, Getter: offline{}, Now: opts.At, TrustedRoots: map[string][]*trust.AMDRootCerts{line: {roots}}})
	if err != nil {
		return claims, classify(err)
	}
	// SEV-SNP has no TCB status of Intel's kind: a report that verifies
	// against a VCEK for its reported TCB counts as up to date, and the
	// policy's minimum SVNs judge the TCB itself.
	claims.TCBStatus = attest.TCBUpToDate
	claims.NotBefore, claims.NotAfter, err = attest.ValidAt("VCEK chain", []*x509.Certificate{cert, roots.ProductCerts.Ask, roots.ProductCerts.Ark}, opts.At)
	return claims, err
}

// classify names the check go-sev-guest's error failed.
func classify(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "expired") || strings.Contains(msg, "not yet valid") || strings.Contains(msg, "current time"):
		return &attest.Rejection{Check: attest.CheckValidity, Reason: msg, Err: err}
	case strings.Contains(msg, "report signature"):
		return &attest.Rejection{Check: attest.CheckSignature, Reason: msg, Err: err}
	default:
		return &attest.Rejection{Check: attest.CheckChain, Reason: msg, Err: err}
	}
}

// offline refuses every fetch: verification uses only what the caller
// gave, and go-sev-guest must never reach AMD's KDS from here.
type offline struct{}

func (offline) Get(url string) ([]byte, error) {
	return nil, errors.New("offline verification: will not fetch " + url)
}

// tcbParts splits a TCB version by the product line's layout (SEV-SNP
// firmware ABI): Turin added the FMC and moved the firmware levels down.
func tcbParts(line string, v uint64) attest.SNPTCB {
	b := func(i int) uint8 { return uint8(v >> (8 * i)) } //nolint:gosec // byte i of v: the truncation is the point
	if line == "Turin" {
		return attest.SNPTCB{FMC: b(0), Bootloader: b(1), TEE: b(2), SNP: b(3), Microcode: b(7)}
	}
	return attest.SNPTCB{Bootloader: b(0), TEE: b(1), SNP: b(6), Microcode: b(7)}
}
