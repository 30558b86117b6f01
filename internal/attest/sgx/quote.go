// Package sgx verifies Intel SGX DCAP quotes (version 3, ECDSA-P256, PCK
// chain in certification data type 5) offline: the quote and QE report
// signatures, the QE report's binding of the attestation key, the PCK
// chain to the embedded Intel SGX Root CA, and Intel PCS collateral (TCB
// info, QE identity) the caller supplies, at the caller's time.
package sgx

import (
	"encoding/binary"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// Quote v3 layout (Intel SGX ECDSA Quote Library API, appendix A).
const (
	headerLen    = 48
	bodyLen      = intelpcs.ReportLen
	signedLen    = headerLen + bodyLen // what the quote signature covers
	sigDataStart = signedLen + 4

	certTypePCKChain = 5
)

// quote is a parsed v3 quote; its fields are slices of the raw bytes.
type quote struct {
	signed   []byte // header and report body
	body     intelpcs.Report
	sig      []byte // r||s
	attKey   []byte // x||y
	qeReport intelpcs.Report
	qeSig    []byte
	qeAuth   []byte
	certData []byte
}

// parseQuote checks the layout: version, key type, lengths, no trailing
// bytes.
func parseQuote(raw []byte) (*quote, error) {
	if len(raw) < sigDataStart {
		return nil, attest.Reject(attest.CheckFormat, "truncated quote: %d bytes, a v3 quote has at least %d", len(raw), sigDataStart)
	}
	if v := binary.LittleEndian.Uint16(raw[0:]); v != 3 {
		return nil, attest.Reject(attest.CheckFormat, "quote version %d, want 3 (SGX DCAP)", v)
	}
	if kt := binary.LittleEndian.Uint16(raw[2:]); kt != 2 {
		return nil, attest.Reject(attest.CheckFormat, "attestation key type %d, want 2 (ECDSA-P256)", kt)
	}
	sigLen := int(binary.LittleEndian.Uint32(raw[signedLen:]))
	switch end := sigDataStart + sigLen; {
	case end > len(raw) || end < sigDataStart:
		return nil, attest.Reject(attest.CheckFormat, "truncated quote: signature data of %d bytes announced, %d present", sigLen, len(raw)-sigDataStart)
	case end < len(raw):
		return nil, attest.Reject(attest.CheckFormat, "%d trailing bytes after the quote", len(raw)-end)
	}
	q := &quote{signed: raw[:signedLen], body: raw[headerLen:signedLen]}
	r := reader{b: raw[sigDataStart:]}
	q.sig, q.attKey, q.qeReport, q.qeSig = r.next(64), r.next(64), r.next(bodyLen), r.next(64)
	q.qeAuth = r.next(int(r.u16()))
	certType := r.u16()
	q.certData = r.next(int(r.u32()))
	if r.short {
		return nil, attest.Reject(attest.CheckFormat, "truncated quote signature data")
	}
	if len(r.b) != 0 {
		return nil, attest.Reject(attest.CheckFormat, "%d unexpected bytes after the certification data", len(r.b))
	}
	if certType != certTypePCKChain {
		return nil, attest.Reject(attest.CheckFormat, "certification data type %d, want 5 (PCK certificate chain)", certType)
	}
	return q, nil
}

// reader takes fields off a byte slice, remembering when it ran short.
type reader struct {
	b     []byte
	short bool
}

func (r *reader) next(n int) []byte {
	if n > len(r.b) {
		r.short = true
		r.b = nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u16() uint16 {
	b := r.next(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *reader) u32() uint32 {
	b := r.next(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// identity reads the enclave identity from a report body.
func identity(body intelpcs.Report) *attest.SGXIdentity {
	return &attest.SGXIdentity{
		MRENCLAVE: attest.Bytes(body.MRENCLAVE()),
		MRSIGNER:  attest.Bytes(body.MRSIGNER()),
		ISVProdID: body.ISVProdID(),
		ISVSVN:    body.ISVSVN(),
		// The report body's ATTRIBUTES sit at 48..63 (flags, then XFRM).
		Attributes: attest.Bytes(body.Attributes()),
	}
}

// TrimQuote cuts the zero bytes a producer's buffer may hold after a v3
// quote's declared length (header, body and signature data), refusing
// any other byte there: the verifier takes no bytes no signature covers.
func TrimQuote(raw []byte) ([]byte, error) {
	if len(raw) < sigDataStart {
		return nil, fmt.Errorf("a quote of %d bytes is shorter than a v3 quote's header and body", len(raw))
	}
	end := uint64(sigDataStart) + uint64(binary.LittleEndian.Uint32(raw[signedLen:]))
	if end > uint64(len(raw)) {
		return nil, fmt.Errorf("the quote declares %d bytes, has %d", end, len(raw))
	}
	for _, b := range raw[end:] {
		if b != 0 {
			return nil, fmt.Errorf("non-zero bytes after the quote's declared %d bytes", end)
		}
	}
	return raw[:end], nil
}
