package intelpcs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-tdx-guest/pcs"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/memo"
)

// Signed is what SGX (v3) and TDX (v4) quotes share after their bodies:
// the attestation key's signature over header and body, and the quoting
// enclave's report that vouches for that key, signed by the platform's
// PCK, whose chain is in the quote.
type Signed struct {
	Body     []byte // header and body: what the attestation key signs
	Sig      []byte // r||s
	AttKey   []byte // x||y, P-256
	QEReport Report
	QESig    []byte // r||s, by the PCK
	QEAuth   []byte
	PCKChain []byte // PEM, leaf first; zero padding allowed
}

// PCK is a PCK certificate chain that chains to the root.
type PCK struct {
	Certs []*x509.Certificate // leaf first
	Key   *ecdsa.PublicKey
	Ext   *pcs.PckExtensions
}

// verifiedPCKs holds PCK chains (by their PEM and the root) whose
// signatures and extensions were checked: a platform sends the same one
// with every quote.
var verifiedPCKs = memo.New[*PCK](4096)

// Verify checks the quote's signatures (the body by the attestation key,
// the QE report by the PCK), that the QE report binds the attestation
// key, and the PCK chain to root at the given time; it returns the PCK and
// the window in which its chain is valid.
func (s *Signed) Verify(root *x509.Certificate, at time.Time) (*PCK, time.Time, time.Time, error) {
	var nb, na time.Time
	attKey, err := p256Key(s.AttKey)
	if err != nil {
		return nil, nb, na, attest.Reject(attest.CheckFormat, "attestation key: %v", err)
	}
	if !VerifyRS(attKey, s.Body, s.Sig) {
		return nil, nb, na, attest.Reject(attest.CheckSignature, "the quote signature does not verify with the attestation key")
	}
	pck, nb, na, err := verifyPCK(bytes.TrimRight(s.PCKChain, "\x00"), root, at)
	if err != nil {
		return nil, nb, na, err
	}
	if !VerifyRS(pck.Key, s.QEReport, s.QESig) {
		return nil, nb, na, attest.Reject(attest.CheckSignature, "the QE report signature does not verify with the PCK certificate")
	}
	// The QE vouches for the attestation key by putting its hash (with
	// the QE authentication data) into its report data.
	want := sha256.Sum256(append(append([]byte(nil), s.AttKey...), s.QEAuth...))
	if rd := s.QEReport.ReportData(); !bytes.Equal(rd[:32], want[:]) || !allZero(rd[32:]) {
		return nil, nb, na, attest.Reject(attest.CheckBinding, "the QE report does not bind the attestation key")
	}
	return pck, nb, na, nil
}

// verifyPCK parses a PCK chain and checks it chains to root, once per
// chain and root; its validity is checked at every call.
func verifyPCK(chainPEM []byte, root *x509.Certificate, at time.Time) (*PCK, time.Time, time.Time, error) {
	if pck, ok := verifiedPCKs.Find(chainPEM, root.Raw); ok {
		nb, na, err := attest.ValidAt("PCK certificate chain", append(pck.Certs[:len(pck.Certs):len(pck.Certs)], root), at)
		return pck, nb, na, err
	}
	certs, err := ParseChain("PCK certificate chain", chainPEM)
	if err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	nb, na, err := attest.VerifyChain("PCK certificate chain", certs, root, at)
	if err != nil {
		return nil, nb, na, err
	}
	pckKey, ok := certs[0].PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, nb, na, attest.Reject(attest.CheckChain, "the PCK certificate's key is %T, want ECDSA", certs[0].PublicKey)
	}
	ext, err := pcs.PckCertificateExtensions(certs[0])
	if err != nil {
		return nil, nb, na, attest.Reject(attest.CheckChain, "reading the PCK certificate's SGX extensions: %v", err)
	}
	pck := &PCK{Certs: certs, Key: pckKey, Ext: ext}
	verifiedPCKs.Keep(pck, chainPEM, root.Raw)
	return pck, nb, na, nil
}

// p256Key reads an uncompressed x||y P-256 point.
func p256Key(xy []byte) (*ecdsa.PublicKey, error) {
	if len(xy) != 64 {
		return nil, fmt.Errorf("%d bytes, want 64", len(xy))
	}
	k, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append([]byte{4}, xy...))
	if err != nil {
		return nil, errors.New("not a point on P-256")
	}
	return k, nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestRootOf returns the test root (of roots) that issued the top of a
// PCK chain, or nil when none did: a verifier told to trust test roots
// checks the chain against that one instead of Intel's.
func TestRootOf(chainPEM []byte, roots []*x509.Certificate) *x509.Certificate {
	if len(roots) == 0 {
		return nil
	}
	certs, err := ParseChain("PCK certificate chain", bytes.TrimRight(chainPEM, "\x00"))
	if err != nil {
		return nil
	}
	top := certs[len(certs)-1]
	for _, r := range roots {
		if top.Equal(r) || top.CheckSignatureFrom(r) == nil {
			return r
		}
	}
	return nil
}
