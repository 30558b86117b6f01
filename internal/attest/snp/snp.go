// Package snp verifies AMD SEV-SNP attestation reports offline: the
// report's signature by its endorsement key (a VCEK or a VLEK the caller
// supplies, or the platform's certificate table carries after the report),
// that key's chain to AMD's ASK (or ASVK) and ARK for the product,
// embedded in go-sev-guest, and that the key is the one for the report's
// chip and reported TCB. go-sev-guest parses the report and checks its
// signature; the endorsement key's AMD extensions are read here, since
// v0.15.0 refuses Turin's (fmcSPL, an 8-byte hardware id).
package snp

import (
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"strings"
	"time"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/google/go-sev-guest/verify"
	"github.com/google/go-sev-guest/verify/trust"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/memo"
)

// policyDebug is guest policy bit 19: the host may debug the guest.
const policyDebug = 1 << 19

// Options of a verification.
type Options struct {
	At time.Time
	// VCEK is the chip's endorsement key certificate (DER or PEM); it
	// takes precedence over the one the evidence's certificate table
	// carries.
	VCEK []byte
	// VLEK is a cloud provider's endorsement key certificate (DER or
	// PEM), for reports signed by one; it takes precedence over the one
	// the certificate table carries.
	VLEK []byte
	// TestRoots replace AMD's roots for the product lines they certify
	// (TestRoots): an insecure test's only. Claims verified by them say
	// so (Claims.TestRoot).
	TestRoots []*x509.Certificate
	// Source, when set, gives the VCEK when neither VCEK nor the
	// evidence does, and the product line's CRL, then required.
	Source Source
}

// Source fetches AMD collateral (AMD KDS, a cache of it).
type Source interface {
	// VCEK is a chip's VCEK certificate (DER) at a reported TCB.
	VCEK(line string, chipID []byte, tcb uint64) ([]byte, error)
	// CRL is the product line's CRL for VCEKs ("vcek") or VLEKs ("vlek").
	CRL(line, signer string) ([]byte, error)
}

// maxCertTable bounds the certificate table after a report: a few
// certificates of a few KiB each (the kernel's SEV_FW_BLOB_MAX_SIZE is 16
// KiB per page count; 64 KiB is generous).
const maxCertTable = 64 << 10

// Verify checks a raw report, optionally followed by the platform's
// certificate table (as the kernel's configfs auxblob or extended report
// returns it, and go-sev-guest's quote providers append it), and returns
// its claims (with those read so far on a rejection).
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("snp: a verification time is required")
	}
	if len(raw) < abi.ReportSize {
		return nil, attest.Reject(attest.CheckFormat, "truncated report: %d bytes, want %d", len(raw), abi.ReportSize)
	}
	report, err := abi.ReportToProto(raw[:abi.ReportSize])
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "SEV-SNP report: %v", err)
	}
	table, err := certTable(raw[abi.ReportSize:])
	if err != nil {
		return nil, err
	}
	claims := &attest.Claims{
		Type:       attest.SNP,
		Debug:      report.GetPolicy()&policyDebug != 0,
		ReportData: report.GetReportData(),
		SNP: &attest.SNPIdentity{
			Version:     report.GetVersion(),
			PolicyFlags: attest.SNPPolicyFlagNames(report.GetPolicy()),
			Measurement: report.GetMeasurement(),
			HostData:    report.GetHostData(),
			GuestPolicy: report.GetPolicy(),
			ReportedTCB: report.GetReportedTcb(),
		},
	}
	info, err := abi.ParseSignerInfo(report.GetSignerInfo())
	if err != nil {
		return claims, attest.Reject(attest.CheckFormat, "SEV-SNP report's signer info: %v", err)
	}
	name, ek := "VCEK", pemOrDER(opts.VCEK)
	if info.SigningKey == abi.VlekReportSigner {
		name, ek = "VLEK", pemOrDER(opts.VLEK)
		if len(ek) == 0 {
			ek = table.GetVlekCert()
		}
	} else if len(ek) == 0 {
		ek = table.GetVcekCert()
	}
	if len(ek) == 0 && name == "VCEK" && opts.Source != nil {
		if ek, err = opts.Source.VCEK(reportLine(report), report.GetChipId(), report.GetReportedTcb()); err != nil {
			return claims, attest.Reject(attest.CheckCollateral, "the chip's VCEK from AMD KDS: %v", err)
		}
		ek = pemOrDER(ek)
	}
	if len(ek) == 0 {
		if name == "VLEK" {
			return claims, attest.Reject(attest.CheckCollateral, "the report is signed by a VLEK: give the VLEK certificate (--collateral DIR with *vlek*, DER or PEM) or evidence whose certificate table carries it")
		}
		return claims, attest.Reject(attest.CheckCollateral, "SEV-SNP evidence needs the chip's VCEK certificate: in the evidence's certificate table, or from collateral (--collateral DIR with *vcek*, DER or PEM)")
	}
	cert, err := x509.ParseCertificate(ek)
	if err != nil {
		return claims, attest.Reject(attest.CheckFormat, "%s certificate: %v", name, err)
	}
	// The endorsement key's issuer names the product line (SEV-Milan,
	// SEV-Genoa, SEV-Turin; SEV-VLEK-Milan for a VLEK) whose ARK and ASK
	// (or ASVK) must certify it: AMD's, embedded, or a test's roots.
	line := strings.TrimPrefix(strings.TrimPrefix(cert.Issuer.CommonName, "SEV-VLEK-"), "SEV-")
	claims.SNP.TCB = tcbParts(line, report.GetReportedTcb())
	candidates, err := rootsFor(line, opts.TestRoots)
	if err != nil {
		return claims, err
	}
	if len(candidates) == 0 {
		return claims, attest.Reject(attest.CheckChain, "the %s is issued by %q: no AMD root for product line %q", name, cert.Issuer.CommonName, line)
	}
	// The roots that certify the key decide; a failure beyond the chain
	// (a signature, a validity) under the roots that do is what is wrong.
	var pc *trust.ProductCerts
	for _, c := range candidates {
		e := verifyWith(raw[:abi.ReportSize], report, name, ek, line, c.roots, opts.At)
		if e == nil {
			pc, claims.TestRoot, err = c.roots.ProductCerts, c.test, nil
			break
		}
		if err == nil || attest.CheckOf(err) == attest.CheckChain {
			err = e
		}
	}
	if err != nil {
		return claims, err
	}
	issuer := pc.Ask
	if name == "VLEK" {
		issuer = pc.Asvk
	}
	// SEV-SNP has no TCB status of Intel's kind: a report that verifies
	// against a VCEK for its reported TCB counts as up to date, and the
	// policy's minimum SVNs judge the TCB itself.
	claims.TCBStatus = attest.TCBUpToDate
	claims.NotBefore, claims.NotAfter, err = attest.ValidAt(name+" chain", []*x509.Certificate{cert, issuer, pc.Ark}, opts.At)
	if err != nil || opts.Source == nil {
		return claims, err
	}
	crl, err := opts.Source.CRL(line, strings.ToLower(name))
	if err != nil {
		return claims, attest.Reject(attest.CheckCollateral, "the %s CRL of %s from AMD KDS: %v", name, line, err)
	}
	next, err := attest.NotRevoked(name+" CRL of "+line, crl, pc.Ark, opts.At, issuer, cert)
	claims.NotAfter = attest.Earlier(claims.NotAfter, next)
	return claims, err
}

// reportLine is the product line a report names by its CPUID (version 3
// reports); older reports do not, and are taken as Milan's, the only line
// they came from.
func reportLine(report *spb.Report) string {
	if fms := report.GetCpuid1EaxFms(); fms != 0 {
		return kds.ProductLineFromFms(fms)
	}
	return "Milan"
}

// verifiedKeys holds endorsement keys (by their certificate, signer kind,
// the report's product line, chip id and reported TCB, and the roots) whose
// chain and match to the report were checked: a chip signs every report
// with the same VCEK until its TCB changes.
var verifiedKeys = memo.New[*x509.Certificate](4096)

// verifyWith checks the report's signature by ek and, once per key, report
// platform and roots, ek's chain to roots and that it is the key for the
// report's chip and TCB; the chain's validity at the time is the caller's
// to check.
func verifyWith(raw []byte, report *spb.Report, name string, ek []byte, line string, roots *trust.AMDRootCerts, at time.Time) error {
	pc := roots.ProductCerts
	var ask, asvk []byte
	if pc.Ask != nil {
		ask = pc.Ask.Raw
	}
	if pc.Asvk != nil {
		asvk = pc.Asvk.Raw
	}
	var tcb [8]byte
	binary.LittleEndian.PutUint64(tcb[:], report.GetReportedTcb())
	key := memo.KeyOf([]byte(name), ek, ask, asvk, pc.Ark.Raw, []byte(reportLine(report)), report.GetChipId(), tcb[:])
	cert, ok := verifiedKeys.Get(key)
	if !ok {
		var err error
		if cert, err = x509.ParseCertificate(ek); err != nil {
			return attest.Reject(attest.CheckFormat, "%s certificate: %v", name, err)
		}
		if err := verifyChain(cert, name, pc, at); err != nil {
			return err
		}
		if err := checkEndorsement(cert, name, line, report); err != nil {
			return err
		}
	}
	if err := verify.SnpReportSignature(raw, cert); err != nil {
		return attest.Reject(attest.CheckSignature, "the report signature does not verify with the %s: %v", name, err)
	}
	if !ok {
		verifiedKeys.Put(key, cert)
	}
	return nil
}

// certTable reads the certificate table after a report: empty is none.
func certTable(raw []byte) (*spb.CertificateChain, error) {
	if len(raw) == 0 {
		return &spb.CertificateChain{}, nil
	}
	if len(raw) > maxCertTable {
		return nil, attest.Reject(attest.CheckFormat, "the certificate table after the report is %d bytes: at most %d", len(raw), maxCertTable)
	}
	var t abi.CertTable
	if err := t.Unmarshal(raw); err != nil {
		return nil, attest.Reject(attest.CheckFormat, "the %d bytes after the report are not a certificate table: %v", len(raw), err)
	}
	return t.Proto(), nil
}

func pemOrDER(b []byte) []byte {
	if block, _ := pem.Decode(b); block != nil {
		return block.Bytes
	}
	return b
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
