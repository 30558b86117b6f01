package aesm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// AESM's protocol (Intel PSW, psw/ae/aesm_service/source/core/ipc/
// messages.proto, proto2): on a unix socket, one request per connection,
// each way a 4-byte little-endian length and a protobuf message. A
// Request and a Response hold one message, in the field of its kind.
// Only the DCAP (ECDSA) requests are spoken here.
const (
	KindInitQuoteEx             protowire.Number = 15
	KindGetQuoteSizeEx          protowire.Number = 16
	KindGetQuoteEx              protowire.Number = 17
	KindUnsupported             protowire.Number = 20 // responses only
	KindGetSupportedAttKeyIDNum protowire.Number = 21
	KindGetSupportedAttKeyIDs   protowire.Number = 22
)

// Field numbers within the messages.
const (
	fieldErrorCode = 1 // every response
	fieldTimeout   = 9 // every request

	// InitQuoteExRequest
	fieldIQAttKeyID = 1
	fieldIQPubKeyID = 3 // b_pub_key_id: whether the buffer below is given
	fieldIQBufSize  = 4
	// InitQuoteExResponse
	fieldIQTargetInfo   = 2
	fieldIQPubKeyIDSize = 3
	fieldIQPubKeyIDOut  = 4

	// GetQuoteSizeExRequest
	fieldQSAttKeyID = 1
	// GetQuoteSizeExResponse
	fieldQSQuoteSize = 2

	// GetQuoteExRequest
	fieldGQReport       = 1
	fieldGQAttKeyID     = 2
	fieldGQQEReportInfo = 3
	fieldGQBufSize      = 4
	// GetQuoteExResponse
	fieldGQQuote = 2

	// GetSupportedAttKeyIDNumResponse
	fieldKeyNum = 2
	// GetSupportedAttKeyIDsRequest and Response
	fieldKeyIDsBufSize = 1
	fieldKeyIDs        = 2
)

// MaxMessage bounds a message either way: a quote with its PCK chain is
// about 5 KiB, a key id list 256 bytes a key.
const MaxMessage = 256 << 10

type schema map[protowire.Number]protowire.Type

var (
	requestSchemas = map[protowire.Number]schema{
		KindInitQuoteEx:             {fieldIQAttKeyID: protowire.BytesType, fieldIQPubKeyID: protowire.VarintType, fieldIQBufSize: protowire.VarintType, fieldTimeout: protowire.VarintType},
		KindGetQuoteSizeEx:          {fieldQSAttKeyID: protowire.BytesType, fieldTimeout: protowire.VarintType},
		KindGetQuoteEx:              {fieldGQReport: protowire.BytesType, fieldGQAttKeyID: protowire.BytesType, fieldGQQEReportInfo: protowire.BytesType, fieldGQBufSize: protowire.VarintType, fieldTimeout: protowire.VarintType},
		KindGetSupportedAttKeyIDNum: {fieldTimeout: protowire.VarintType},
		KindGetSupportedAttKeyIDs:   {fieldKeyIDsBufSize: protowire.VarintType, fieldTimeout: protowire.VarintType},
	}
	responseSchemas = map[protowire.Number]schema{
		KindInitQuoteEx:             {fieldErrorCode: protowire.VarintType, fieldIQTargetInfo: protowire.BytesType, fieldIQPubKeyIDSize: protowire.VarintType, fieldIQPubKeyIDOut: protowire.BytesType},
		KindGetQuoteSizeEx:          {fieldErrorCode: protowire.VarintType, fieldQSQuoteSize: protowire.VarintType},
		KindGetQuoteEx:              {fieldErrorCode: protowire.VarintType, fieldGQQuote: protowire.BytesType, fieldGQQEReportInfo: protowire.BytesType},
		KindUnsupported:             {fieldErrorCode: protowire.VarintType},
		KindGetSupportedAttKeyIDNum: {fieldErrorCode: protowire.VarintType, fieldKeyNum: protowire.VarintType},
		KindGetSupportedAttKeyIDs:   {fieldErrorCode: protowire.VarintType, fieldKeyIDs: protowire.BytesType},
	}
)

// Message is one decoded request or response: its kind and its fields,
// each at most once.
type Message struct {
	Kind   protowire.Number
	Varint map[protowire.Number]uint64
	Bytes  map[protowire.Number][]byte
}

// NewMessage starts a message of a kind.
func NewMessage(kind protowire.Number) *Message {
	return &Message{Kind: kind, Varint: map[protowire.Number]uint64{}, Bytes: map[protowire.Number][]byte{}}
}

// Marshal encodes the message in its envelope (Request or Response),
// fields in number order as protobuf encoders write them.
func (m *Message) Marshal() []byte {
	var inner []byte
	for n := protowire.Number(1); n <= 32; n++ {
		if v, ok := m.Varint[n]; ok {
			inner = protowire.AppendTag(inner, n, protowire.VarintType)
			inner = protowire.AppendVarint(inner, v)
		}
		if b, ok := m.Bytes[n]; ok {
			inner = protowire.AppendTag(inner, n, protowire.BytesType)
			inner = protowire.AppendBytes(inner, b)
		}
	}
	out := protowire.AppendTag(nil, m.Kind, protowire.BytesType)
	return protowire.AppendBytes(out, inner)
}

// DecodeRequest reads a Request strictly: one DCAP request, its fields
// known, each once, of their declared types.
func DecodeRequest(b []byte) (*Message, error) { return decode("request", b, requestSchemas) }

// DecodeResponse reads a Response as strictly, and requires its error
// code.
func DecodeResponse(b []byte) (*Message, error) {
	m, err := decode("response", b, responseSchemas)
	if err != nil {
		return nil, err
	}
	if _, ok := m.Varint[fieldErrorCode]; !ok {
		return nil, fmt.Errorf("aesm response: no errorCode (field 1), which every response carries")
	}
	return m, nil
}

func decode(what string, b []byte, schemas map[protowire.Number]schema) (*Message, error) {
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("aesm %s: %d bytes, more than %d", what, len(b), MaxMessage)
	}
	kind, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return nil, fmt.Errorf("aesm %s: %w", what, protowire.ParseError(n))
	}
	s, ok := schemas[kind]
	if !ok || typ != protowire.BytesType {
		return nil, fmt.Errorf("aesm %s: field %d (wire type %d) is not a DCAP message this client speaks", what, kind, typ)
	}
	inner, m2 := protowire.ConsumeBytes(b[n:])
	if m2 < 0 {
		return nil, fmt.Errorf("aesm %s: %w", what, protowire.ParseError(m2))
	}
	if rest := len(b) - n - m2; rest != 0 {
		return nil, fmt.Errorf("aesm %s: %d bytes after its one message", what, rest)
	}
	m := NewMessage(kind)
	for len(inner) > 0 {
		num, t, n := protowire.ConsumeTag(inner)
		if n < 0 {
			return nil, fmt.Errorf("aesm %s %d: %w", what, kind, protowire.ParseError(n))
		}
		want, ok := s[num]
		switch {
		case !ok:
			return nil, fmt.Errorf("aesm %s %d: unknown field %d", what, kind, num)
		case t != want:
			return nil, fmt.Errorf("aesm %s %d: field %d has wire type %d, want %d", what, kind, num, t, want)
		}
		_, dupV := m.Varint[num]
		_, dupB := m.Bytes[num]
		if dupV || dupB {
			return nil, fmt.Errorf("aesm %s %d: field %d twice", what, kind, num)
		}
		inner = inner[n:]
		if t == protowire.VarintType {
			v, n := protowire.ConsumeVarint(inner)
			if n < 0 {
				return nil, fmt.Errorf("aesm %s %d: field %d: %w", what, kind, num, protowire.ParseError(n))
			}
			m.Varint[num], inner = v, inner[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(inner)
		if n < 0 {
			return nil, fmt.Errorf("aesm %s %d: field %d: %w", what, kind, num, protowire.ParseError(n))
		}
		m.Bytes[num], inner = v, inner[n:]
	}
	return m, nil
}

// WriteFrame writes a length-prefixed message.
func WriteFrame(w io.Writer, msg []byte) error {
	if len(msg) > MaxMessage {
		return fmt.Errorf("aesm: message of %d bytes, more than %d", len(msg), MaxMessage)
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(msg)))) //nolint:gosec // at most MaxMessage, checked above
	if err == nil {
		_, err = w.Write(msg)
	}
	return err
}

// ReadFrame reads a length-prefixed message, refusing one over
// MaxMessage before reading it.
func ReadFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > MaxMessage {
		return nil, fmt.Errorf("aesm: a message of %d bytes announced, more than %d", size, MaxMessage)
	}
	msg := make([]byte, size)
	if _, err := io.ReadFull(r, msg); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return msg, nil
}
