package snp

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/google/go-sev-guest/verify/trust"

	"github.com/cloister-cc/cloister/internal/attest"
)

// kdsArc is AMD's arc for the extensions of the certificates its Key
// Distribution Service issues (VCEK and VLEK specification, 57230).
var kdsArc = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3704, 1}

// The extensions under kdsArc, by the rest of their OID: a TCB
// component's security patch level (3.x), the product name (2), the chip's
// hardware id (4, VCEK) and the cloud provider's id (5, VLEK). fmcSPL
// (3.9) came with Turin, which go-sev-guest v0.15.0 refuses as unknown.
const (
	splBootloader = 1
	splTEE        = 2
	splSNP        = 3
	splMicrocode  = 8
	splFMC        = 9
)

// kdsExtensions are an endorsement key certificate's AMD extensions.
type kdsExtensions struct {
	ProductName string
	SPL         map[int]uint8 // by the OID's last arc under 3
	HWID        []byte
	CSPID       string
}

// parseKDSExtensions reads the AMD extensions of a VCEK or VLEK. An AMD
// extension this code does not know is left alone (as x509 leaves a
// non-critical one), so a new product line's new component does not make
// its every report unverifiable; those it knows must decode.
func parseKDSExtensions(cert *x509.Certificate) (*kdsExtensions, error) {
	out := &kdsExtensions{SPL: map[int]uint8{}}
	for _, ext := range cert.Extensions {
		if len(ext.Id) <= len(kdsArc) || !ext.Id[:len(kdsArc)].Equal(kdsArc) {
			continue
		}
		rest := ext.Id[len(kdsArc):]
		var err error
		switch {
		case len(rest) == 1 && rest[0] == 2:
			err = unmarshalAll(ext.Value, &out.ProductName, "ia5")
		case len(rest) == 2 && rest[0] == 3:
			var v int
			if err = unmarshalAll(ext.Value, &v, ""); err == nil && (v < 0 || v > 255) {
				err = fmt.Errorf("%d is not a byte", v)
			}
			out.SPL[rest[1]] = uint8(v) //nolint:gosec // range checked above
		case len(rest) == 1 && rest[0] == 4:
			out.HWID, err = hardwareID(ext.Value)
		case len(rest) == 1 && rest[0] == 5:
			err = unmarshalAll(ext.Value, &out.CSPID, "ia5")
		}
		if err != nil {
			return nil, fmt.Errorf("extension %s: %w", ext.Id, err)
		}
	}
	return out, nil
}

// hardwareID reads a VCEK's hardware id: 64 bytes (Milan, Genoa) or 8
// (Turin), which KDS writes without an ASN.1 tag; tagged as an OCTET
// STRING is taken too, as go-sev-guest's fake chips write it.
func hardwareID(v []byte) ([]byte, error) {
	if len(v) == abi.ChipIDSize || len(v) == turinHWIDSize {
		return v, nil
	}
	var octets []byte
	if err := unmarshalAll(v, &octets, ""); err != nil {
		return nil, fmt.Errorf("hardware id of %d bytes: %w", len(v), err)
	}
	if len(octets) != abi.ChipIDSize && len(octets) != turinHWIDSize {
		return nil, fmt.Errorf("hardware id of %d bytes, want %d or %d", len(octets), abi.ChipIDSize, turinHWIDSize)
	}
	return octets, nil
}

// turinHWIDSize is a Turin VCEK's hardware id's size.
const turinHWIDSize = 8

func unmarshalAll(der []byte, v any, params string) error {
	rest, err := asn1.UnmarshalWithParams(der, v, params)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	return err
}

// checkEndorsement checks that ek is an endorsement key certificate of
// AMD's form (KDS specification: X.509 v3, RSASSA-PSS with SHA-384 by its
// issuer, an ECDSA P-384 key, subject SEV-VCEK or SEV-VLEK) for this
// report: its product line, the TCB it was derived at (the report's
// reported TCB) and, for a VCEK, the chip (the report's chip id).
func checkEndorsement(ek *x509.Certificate, name, line string, report *spb.Report) error {
	key, ok := ek.PublicKey.(*ecdsa.PublicKey)
	switch {
	case ek.Version != 3:
		return attest.Reject(attest.CheckChain, "the %s certificate is X.509 version %d, want 3", name, ek.Version)
	case ek.SignatureAlgorithm != x509.SHA384WithRSAPSS:
		return attest.Reject(attest.CheckChain, "the %s certificate is signed with %v, want SHA-384 with RSASSA-PSS", name, ek.SignatureAlgorithm)
	case !ok || key.Curve != elliptic.P384():
		return attest.Reject(attest.CheckChain, "the %s certificate's key is not ECDSA P-384", name)
	case ek.Subject.CommonName != "SEV-"+name:
		return attest.Reject(attest.CheckChain, "the %s certificate's subject is %q, want SEV-%s", name, ek.Subject.CommonName, name)
	}
	exts, err := parseKDSExtensions(ek)
	if err != nil {
		return attest.Reject(attest.CheckChain, "the %s certificate's AMD extensions: %v", name, err)
	}
	if product, _, _ := strings.Cut(exts.ProductName, "-"); product != line {
		return attest.Reject(attest.CheckChain, "the %s certificate is for product %q, its issuer for %s", name, exts.ProductName, line)
	}
	if fms := report.GetCpuid1EaxFms(); fms != 0 && reportLine(report) != line {
		return attest.Reject(attest.CheckChain, "the report is from a %s chip, the %s is %s's", reportLine(report), name, line)
	}
	if err := matchTCB(exts.SPL, line, report.GetReportedTcb()); err != nil {
		return attest.Reject(attest.CheckChain, "the %s is not the one for the report's reported TCB %#x: %v", name, report.GetReportedTcb(), err)
	}
	if name == "VLEK" {
		if exts.HWID != nil {
			return attest.Reject(attest.CheckChain, "the VLEK certificate names a chip: VLEKs are a cloud provider's")
		}
		return nil
	}
	if !chipMatches(exts.HWID, report.GetChipId()) {
		return attest.Reject(attest.CheckChain, "the VCEK is another chip's: its hardware id %x is not the report's chip id", exts.HWID)
	}
	return nil
}

// matchTCB checks the endorsement key's security patch levels are the
// reported TCB's, by the product line's layout.
func matchTCB(spl map[int]uint8, line string, reported uint64) error {
	parts := tcbParts(line, reported)
	want := []struct {
		oid  int
		name string
		have uint8
	}{{splBootloader, "bootloader", parts.Bootloader}, {splTEE, "TEE", parts.TEE}, {splSNP, "SNP firmware", parts.SNP}, {splMicrocode, "microcode", parts.Microcode}}
	if line == "Turin" {
		want = append(want, struct {
			oid  int
			name string
			have uint8
		}{splFMC, "FMC", parts.FMC})
	}
	for _, w := range want {
		v, ok := spl[w.oid]
		if !ok {
			return fmt.Errorf("it has no %s SPL", w.name)
		}
		if v != w.have {
			return fmt.Errorf("%s SPL %d, reported %d", w.name, v, w.have)
		}
	}
	return nil
}

// chipMatches says whether a VCEK's hardware id is the report's chip id:
// 64 bytes for Milan and Genoa; Turin's is 8, the chip id's first 8
// bytes, the rest of which are zero.
func chipMatches(hwid, chipID []byte) bool {
	if len(hwid) == 0 || len(hwid) > len(chipID) || len(chipID) != abi.ChipIDSize {
		return false
	}
	return bytes.Equal(hwid, chipID[:len(hwid)]) && allZero(chipID[len(hwid):])
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// verifyChain checks ek chains to the roots' ARK through their ASK (a
// VCEK) or ASVK (a VLEK) at the given time.
func verifyChain(ek *x509.Certificate, name string, pc *trust.ProductCerts, at time.Time) error {
	issuer := pc.Ask
	if name == "VLEK" {
		issuer = pc.Asvk
	}
	if issuer == nil {
		return attest.Reject(attest.CheckChain, "no issuer of %ss under this ARK", name)
	}
	roots, intermediates := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(pc.Ark)
	intermediates.AddCert(issuer)
	_, err := ek.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return attest.Reject(attest.CheckValidity, "the %s chain is not valid at %s: %v", name, at.UTC().Format(time.RFC3339), err)
	default:
		return attest.Reject(attest.CheckChain, "the %s does not chain to AMD's ARK: %v", name, err)
	}
}
