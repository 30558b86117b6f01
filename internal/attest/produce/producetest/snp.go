// Package producetest simulates the lowest layer under Cloister's evidence
// producers, for tests and the development cluster's fake confidential
// VMs: SEV-SNP reports signed with go-sev-guest's test keys (an AMD-shaped
// chain under a test ARK, never AMD's), a configfs-tsm report folder that
// answers as the kernel does, a Nitro Secure Module whose documents
// chain to a test root, and an SGX quoting enclave whose quotes and Intel
// PCS collateral chain to a test root (sgx.go). Everything it makes verifies only where a verifier
// was told to trust test roots, and says so.
package producetest

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	sevtest "github.com/google/go-sev-guest/testing"
)

// SNPSigner signs SEV-SNP reports as a chip with a test VCEK (and VLEK)
// would, under go-sev-guest's test ARK and ASK.
type SNPSigner struct {
	signer *sevtest.AmdSigner
	// Measurement and HostData go into every report: what the hypervisor
	// launched and what it bound at launch (a pod policy's digest).
	Measurement [48]byte
	HostData    [32]byte
	// VLEK signs with the VLEK instead of the VCEK.
	VLEK bool
}

// NewSNPSigner makes a Milan signer whose certificates are valid from now.
func NewSNPSigner(now time.Time) (*SNPSigner, error) {
	return NewSNPSignerFor(kds.ProductName(abi.DefaultSevProduct()), now)
}

// NewSNPSignerFor makes a signer of a product ("Milan", "Genoa") whose
// certificates, named as AMD names that product's, are valid from now.
func NewSNPSignerFor(product string, now time.Time) (*SNPSigner, error) {
	s, err := sevtest.DefaultTestOnlyCertChain(product, now.Add(-time.Hour))
	if err != nil {
		return nil, fmt.Errorf("go-sev-guest test chain: %w", err)
	}
	return &SNPSigner{signer: s}, nil
}

// Offsets in the SEV-SNP ATTESTATION_REPORT (the firmware ABI, table 23).
const (
	offPolicy      = 0x08
	offReportData  = 0x50
	offMeasurement = 0x90
	offHostData    = 0xC0
)

// policyBase is a guest policy without debugging: ABI 0.0, SMT allowed,
// bit 17 (reserved, must be one) set.
const policyBase = 1<<16 | 1<<17

// Report is a signed report over reportData (at most 64 bytes).
func (s *SNPSigner) Report(reportData []byte) ([]byte, error) {
	if len(reportData) > abi.ReportDataSize {
		return nil, fmt.Errorf("report data is %d bytes: at most %d", len(reportData), abi.ReportDataSize)
	}
	info := abi.SignerInfo{SigningKey: abi.VcekReportSigner}
	if s.VLEK {
		info.SigningKey = abi.VlekReportSigner
	}
	raw := sevtest.CreateRawReport(&sevtest.TestReportOptions{ReportData: reportData, SignerInfo: info})
	report := raw[:abi.ReportSize]
	binary.LittleEndian.PutUint64(report[offPolicy:], policyBase)
	copy(report[offMeasurement:offMeasurement+48], s.Measurement[:])
	copy(report[offHostData:offHostData+32], s.HostData[:])
	r, sig, err := s.signer.Sign(abi.SignedComponent(report))
	if err != nil {
		return nil, err
	}
	if err := abi.SetSignature(r, sig, report); err != nil {
		return nil, err
	}
	return bytes.Clone(report), nil
}

// CertTable is the platform's certificate table (ARK, ASK, VCEK, VLEK,
// ASVK), as the kernel returns it in the auxblob or an extended report.
func (s *SNPSigner) CertTable() ([]byte, error) { return s.signer.CertTableBytes() }

// Roots are the test ARK, ASK and ASVK: what a verifier must be told to
// trust for this signer's reports to verify.
func (s *SNPSigner) Roots() []*x509.Certificate {
	return []*x509.Certificate{s.signer.Ark, s.signer.Ask, s.signer.Asvk}
}

// RootsPEM is Roots as a PEM file.
func (s *SNPSigner) RootsPEM() []byte {
	var b bytes.Buffer
	for _, c := range s.Roots() {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// FakeDevice is go-sev-guest's fake /dev/sev-guest, signing with s: it
// answers a request for each key's report data with a report over the
// value (the key itself, unless a test makes the device lie), and offers
// s's certificate table to extended requests.
func (s *SNPSigner) FakeDevice(answers map[[64]byte][]byte) (*sevtest.Device, error) {
	table, err := s.CertTable()
	if err != nil {
		return nil, err
	}
	d := &sevtest.Device{ReportDataRsp: map[string]any{}, Certs: table, Signer: s.signer}
	for req, over := range answers {
		report, err := s.Report(over)
		if err != nil {
			return nil, err
		}
		rsp := &sevtest.GetReportResponse{}
		rsp.Resp.ReportSize = uint32(len(report)) //nolint:gosec // 1184
		copy(rsp.Resp.Data[:], report)
		d.ReportDataRsp[hex.EncodeToString(req[:])] = rsp
	}
	return d, nil
}

// VCEK is the test VCEK certificate (DER), as a fake AMD KDS serves it.
func (s *SNPSigner) VCEK() []byte { return s.signer.Vcek.Raw }

// CRL is a CRL of the test ARK listing serials, current from this to
// next, as AMD KDS serves a product line's.
func (s *SNPSigner) CRL(this, next time.Time, serials ...*big.Int) ([]byte, error) {
	tmpl := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: this, NextUpdate: next, SignatureAlgorithm: x509.SHA384WithRSAPSS}
	for _, n := range serials {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: n, RevocationTime: this})
	}
	return x509.CreateRevocationList(rand.Reader, tmpl, s.signer.Ark, s.signer.Keys.Ark)
}

// ASK is the test ASK certificate.
func (s *SNPSigner) ASK() *x509.Certificate { return s.signer.Ask }
