// Package verify dispatches evidence to its format's verifier and loads
// what the verifiers need from the caller: collateral from a directory,
// evidence that may be base64.
package verify

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/attest/nitro"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/attest/snp"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

// Options are the caller's inputs to a verification.
type Options struct {
	// At is the verification time.
	At time.Time
	// CollateralDir holds the format's collateral, laid out like the
	// verifiers' testdata (sgx, tdx: tcb_info*.json, qe_identity*.json,
	// *certs*.pem, and optionally the CRLs pck_crl* and root*crl*; snp:
	// the VCEK as *vcek* or the VLEK as *vlek*, DER or PEM).
	CollateralDir string
	// Folder, when set, gives what CollateralDir would, kept in memory
	// (collateral.Folder: read once, watched): CAS's --collateral-dir.
	Folder Folder
	// SimKeys, when set, are the only keys sim evidence may be signed by.
	SimKeys []*ecdsa.PublicKey
	// Intel, when set, gives Intel collateral for each quote's platform
	// (a PCS or PCCS, a cache of one) in place of CollateralDir's, and
	// makes the PCK CA's and root CA's CRLs required.
	Intel intelpcs.Source
	// SNP, when set, gives a chip's VCEK when the evidence carries none
	// and the product line's CRL, then required (AMD KDS, a cache of it).
	SNP snp.Source
	// TestRoots are roots taken beside the vendors' (SEV-SNP's ARK and ASK
	// by their names, a Nitro root or an SGX root by what it issued):
	// insecure, for tests and
	// fake confidential VMs only (LoadTestRoots). Claims verified by one
	// are marked TestRoot.
	TestRoots []*x509.Certificate
}

// Evidence verifies ev and returns its claims.
func Evidence(ev attest.Evidence, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		opts.At = time.Now()
	}
	raw := Decode(ev.Raw)
	if len(raw) == 0 {
		return nil, attest.Reject(attest.CheckFormat, "the evidence is empty")
	}
	switch ev.Type {
	case attest.SGX, attest.TDX:
		var col intelpcs.Collateral
		if opts.Intel == nil {
			f, err := opts.folder()
			if err != nil {
				return nil, err
			}
			col = f.Intel
		}
		if ev.Type == attest.TDX {
			return tdx.Verify(raw, tdx.Options{Collateral: col, Source: opts.Intel, RequireCRLs: opts.Intel != nil, At: opts.At})
		}
		return sgx.Verify(raw, sgx.Options{Collateral: col, Source: opts.Intel, RequireCRLs: opts.Intel != nil, At: opts.At, TestRoots: opts.TestRoots})
	case attest.Sim:
		return sim.Verify(raw, opts.At, opts.SimKeys...)
	case attest.Nitro:
		return nitro.Verify(raw, nitro.Options{At: opts.At, TestRoots: opts.TestRoots})
	case attest.SNP:
		// A folder without a VCEK or VLEK leaves the one the evidence's
		// certificate table carries, which the verifier then needs.
		f, err := opts.folder()
		if err != nil {
			return nil, err
		}
		return snp.Verify(raw, snp.Options{At: opts.At, VCEK: f.VCEK, VLEK: f.VLEK, TestRoots: opts.TestRoots, Source: opts.SNP})
	}
	// A known type spelled otherwise ("SIM", "sgx "): refused too, never
	// passed on without claims.
	t, err := attest.ParseType(string(ev.Type))
	if err != nil {
		return nil, err
	}
	return nil, attest.Reject(attest.CheckType, "evidence type %q: write it %q", ev.Type, t)
}

// TestRootsFlag names the one flag by which a command trusts test roots.
const TestRootsFlag = "insecure-test-roots"

// LoadTestRootsFlag reads the test roots a command's TestRootsFlag names
// (none for an empty file name), saying on w that evidence chaining to
// them proves nothing.
func LoadTestRootsFlag(file string, w io.Writer) ([]*x509.Certificate, error) {
	if file == "" {
		return nil, nil
	}
	roots, err := LoadTestRoots(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", TestRootsFlag, err)
	}
	_, _ = fmt.Fprintf(w, "INSECURE: trusting %d test roots from %s: evidence that chains to them is vouched for by no vendor\n", len(roots), file)
	return roots, nil
}

// LoadTestRoots reads a PEM file of test roots (Options.TestRoots).
func LoadTestRoots(file string) ([]*x509.Certificate, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	roots, err := ParseTestRoots(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return roots, nil
}

// ParseTestRoots reads PEM certificates (Options.TestRoots); other PEM
// blocks are skipped, and none at all is an error.
func ParseTestRoots(rest []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// Decode returns raw, or what it decodes to when it is base64 text (with
// or without padding and line breaks).
func Decode(raw []byte) []byte {
	text := bytes.Join(bytes.Fields(raw), nil)
	if len(text) == 0 {
		return raw
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(string(text)); err == nil && len(d) > 0 {
			return d
		}
	}
	return raw
}

// Folder gives a collateral folder's contents.
type Folder interface {
	Contents() (FolderContents, error)
}

// FolderContents is what a collateral folder holds: Intel PCS collateral
// (SGX and TDX alike) and SEV-SNP endorsement keys; what it lacks is
// empty, and the verifier that needs it says so.
type FolderContents struct {
	Intel      intelpcs.Collateral
	VCEK, VLEK []byte
}

// Contents makes FolderContents a Folder of itself: collateral handed
// over whole (with the evidence it judges, say).
func (f FolderContents) Contents() (FolderContents, error) { return f, nil }

// folder is the caller's folder's contents: Folder's, else CollateralDir
// read now.
func (o Options) folder() (FolderContents, error) {
	if o.Folder != nil {
		return o.Folder.Contents()
	}
	return ReadFolder(o.CollateralDir)
}

// ReadFolder reads a collateral folder (Options.CollateralDir's layout);
// no dir is an empty folder. Two files for one part are refused, naming
// both.
func ReadFolder(dir string) (FolderContents, error) {
	var f FolderContents
	for _, part := range []struct {
		pattern string
		into    *[]byte
	}{
		{"tcb_info*.json", &f.Intel.TCBInfo}, {"qe_identity*.json", &f.Intel.QEIdentity}, {"*certs*.pem", &f.Intel.SigningChain},
		{"pck_crl*", &f.Intel.PCKCRL}, {"root*crl*", &f.Intel.RootCRL}, {"*vcek*", &f.VCEK}, {"*vlek*", &f.VLEK},
	} {
		var err error
		if *part.into, err = optional(dir, part.pattern); err != nil {
			return FolderContents{}, err
		}
	}
	return f, nil
}

// optional reads the single file of dir matching pattern, if there is
// one; no dir is none.
func optional(dir string, pattern string) ([]byte, error) {
	if matches, _ := filepath.Glob(filepath.Join(dir, pattern)); dir == "" || len(matches) == 0 {
		return nil, nil
	}
	return one(dir, pattern)
}

// one reads the single file of dir matching pattern.
func one(dir, pattern string) ([]byte, error) {
	matches, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return nil, err
	}
	switch len(matches) {
	case 0:
		return nil, attest.Reject(attest.CheckCollateral, "no %s in %s", pattern, dir)
	case 1:
		b, err := os.ReadFile(matches[0])
		if err != nil {
			return nil, attest.Reject(attest.CheckCollateral, "reading %s: %v", matches[0], err)
		}
		return b, nil
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = filepath.Base(m)
	}
	return nil, attest.Reject(attest.CheckCollateral, "%d files match %s in %s (%s): keep one", len(matches), pattern, dir, strings.Join(names, ", "))
}

// ParseTime reads a verification time: RFC 3339 or Unix seconds.
func ParseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var sec int64
	if _, err := fmt.Sscanf(s, "%d", &sec); err == nil && fmt.Sprint(sec) == strings.TrimSpace(s) {
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("time %q: use RFC 3339 (2022-12-20T00:50:04Z) or Unix seconds", s)
}
