package tdx

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// The layout of a TDX quote (Intel TDX DCAP Quoting Library API, v4 and
// v5): a 48-byte header; v5 then describes its body (type, size); the TD
// report body (TD 1.0: 584 bytes; TD 1.5, v5 body type 3: 648, adding
// TEE_TCB_SVN2 and MRSERVICETD); the signature data's length and the
// signature data: the attestation key's signature over everything before
// that length, the key, and the certification data (type 6) holding the
// quoting enclave's report, its signature by the PCK, its authentication
// data and the PCK chain (type 5).
const (
	headerLen        = 48
	td10Len          = 584
	td15Len          = 648
	bodyDescLen      = 6
	attKeyTypeECDSA  = 2
	teeTypeTDX       = 0x81
	bodyTypeTD10     = 2
	bodyTypeTD15     = 3
	certTypeQEReport = 6
	certTypePCKChain = 5
	// maxQuote bounds a quote: a PCK chain of a few KiB; 64 KiB is
	// generous, and more is not a quote.
	maxQuote = 64 << 10
)

// intelQEVendor is the QE vendor id of Intel's quoting enclave.
var intelQEVendor = []byte{0x93, 0x9a, 0x72, 0x33, 0xf7, 0x9c, 0x4c, 0xa9, 0x94, 0x0a, 0x0d, 0xb3, 0x95, 0x7f, 0x06, 0x07}

// quote is a parsed TDX quote, its fields slices of the raw bytes.
type quote struct {
	Version  uint16
	BodyType uint16 // 2 (TD 1.0) or 3 (TD 1.5); v4 is 2
	Body     []byte // the TD report body
	Signed   intelpcs.Signed
	// Len is the quote's length by its fields: what follows is padding.
	Len int
}

// TD report body fields (offsets in the body).
func (q *quote) TEETCBSVN() []byte      { return q.Body[0:16] }
func (q *quote) MRSEAM() []byte         { return q.Body[16:64] }
func (q *quote) MRSIGNERSEAM() []byte   { return q.Body[64:112] }
func (q *quote) SEAMAttributes() []byte { return q.Body[112:120] }
func (q *quote) TDAttributes() []byte   { return q.Body[120:128] }
func (q *quote) MRTD() []byte           { return q.Body[136:184] }
func (q *quote) MRCONFIGID() []byte     { return q.Body[184:232] }
func (q *quote) RTMR(i int) []byte      { return q.Body[328+48*i : 376+48*i] }
func (q *quote) ReportData() []byte     { return q.Body[520:584] }

// TEETCBSVN2 is the TCB SVN of the TDX module now running (TD 1.5), nil
// for a TD 1.0 body.
func (q *quote) TEETCBSVN2() []byte {
	if q.BodyType != bodyTypeTD15 {
		return nil
	}
	return q.Body[584:600]
}

// MRSERVICETD is the measurement of the service TDs bound to the TD (TD
// 1.5), nil for a TD 1.0 body.
func (q *quote) MRSERVICETD() []byte {
	if q.BodyType != bodyTypeTD15 {
		return nil
	}
	return q.Body[600:648]
}

// reader reads a quote's fields in order, remembering the first shortfall.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = fmt.Errorf("%s: %d bytes at offset %d, the quote has %d", what, n, r.off, len(r.b))
		return nil
	}
	out := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return out
}

func (r *reader) u16(what string) uint16 {
	if b := r.bytes(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32(what string) int {
	if b := r.bytes(4, what); b != nil {
		v := binary.LittleEndian.Uint32(b)
		if v > maxQuote {
			r.err = fmt.Errorf("%s: %d bytes, more than a quote holds", what, v)
			return 0
		}
		return int(v)
	}
	return 0
}

// parseQuote reads a v4 or v5 TDX quote. Zero bytes after its declared
// length are the rest of a fixed-size buffer (Linux's TDX guest device
// and some quote services return one) and are ignored; any other byte
// there is refused, since nothing signed accounts for it.
func parseQuote(raw []byte) (*quote, error) {
	if len(raw) > maxQuote {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote of %d bytes: at most %d", len(raw), maxQuote)
	}
	q, err := readQuote(raw)
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "TDX quote: %v", err)
	}
	return q, nil
}

func readQuote(raw []byte) (*quote, error) {
	r := &reader{b: raw}
	header := r.bytes(headerLen, "header")
	if r.err != nil {
		return nil, r.err
	}
	q := &quote{Version: binary.LittleEndian.Uint16(header[0:]), BodyType: bodyTypeTD10}
	switch {
	case q.Version != 4 && q.Version != 5:
		return nil, fmt.Errorf("version %d: TDX quotes are versions 4 and 5", q.Version)
	case binary.LittleEndian.Uint16(header[2:]) != attKeyTypeECDSA:
		return nil, fmt.Errorf("attestation key type %d, want %d (ECDSA P-256)", binary.LittleEndian.Uint16(header[2:]), attKeyTypeECDSA)
	case binary.LittleEndian.Uint32(header[4:]) != teeTypeTDX:
		return nil, fmt.Errorf("TEE type %#x, want %#x (TDX)", binary.LittleEndian.Uint32(header[4:]), teeTypeTDX)
	case !bytes.Equal(header[12:28], intelQEVendor):
		return nil, fmt.Errorf("QE vendor id %x is not Intel's", header[12:28])
	}
	bodyLen := td10Len
	if q.Version == 5 {
		q.BodyType = r.u16("body type")
		bodyLen = r.u32("body size")
		want := map[uint16]int{bodyTypeTD10: td10Len, bodyTypeTD15: td15Len}[q.BodyType]
		switch {
		case r.err != nil:
			return nil, r.err
		case want == 0:
			return nil, fmt.Errorf("body type %d: a TDX quote v5 carries a TD report, type %d (TD 1.0) or %d (TD 1.5)", q.BodyType, bodyTypeTD10, bodyTypeTD15)
		case bodyLen != want:
			return nil, fmt.Errorf("body size %d, a body of type %d has %d", bodyLen, q.BodyType, want)
		}
	}
	q.Body = r.bytes(bodyLen, "TD report body")
	signed := raw[:r.off]
	sig := r.bytes(r.u32("signature data size"), "signature data")
	if r.err != nil {
		return nil, r.err
	}
	q.Len = r.off
	if rest := raw[r.off:]; len(bytes.TrimRight(rest, "\x00")) > 0 {
		return nil, fmt.Errorf("%d bytes after the quote's signature data, not all zero", len(rest))
	}
	s := &reader{b: sig}
	q.Signed = intelpcs.Signed{Body: signed, Sig: s.bytes(64, "quote signature"), AttKey: s.bytes(64, "attestation key")}
	if t := s.u16("certification data type"); s.err == nil && t != certTypeQEReport {
		return nil, fmt.Errorf("certification data type %d, want %d (QE report)", t, certTypeQEReport)
	}
	cert := &reader{b: s.bytes(s.u32("certification data size"), "certification data")}
	q.Signed.QEReport = intelpcs.Report(cert.bytes(intelpcs.ReportLen, "QE report"))
	q.Signed.QESig = cert.bytes(64, "QE report signature")
	q.Signed.QEAuth = cert.bytes(int(cert.u16("QE authentication data size")), "QE authentication data")
	if t := cert.u16("PCK certification data type"); cert.err == nil && t != certTypePCKChain {
		return nil, fmt.Errorf("PCK certification data type %d, want %d (PCK chain)", t, certTypePCKChain)
	}
	q.Signed.PCKChain = cert.bytes(cert.u32("PCK chain size"), "PCK chain")
	for _, r := range []*reader{s, cert} {
		if r.err != nil {
			return nil, r.err
		}
	}
	if len(sig) != s.off || len(cert.b) != cert.off {
		return nil, fmt.Errorf("%d bytes of the signature data are not its fields", len(sig)-s.off+len(cert.b)-cert.off)
	}
	return q, nil
}
