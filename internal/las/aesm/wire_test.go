package aesm

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// messagesProto is the DCAP part of AESM's messages.proto (proto2), built
// as the protobuf library's descriptors: the library's own encoder and
// decoder check this package's, field by field.
func messagesProto(t *testing.T) (req, resp protoreflect.MessageDescriptor) {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: opt, Type: typ.Enum()}
		if msg != "" {
			f.TypeName = proto.String(msg)
		}
		return f
	}
	const (
		u32 = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		u64 = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		byt = descriptorpb.FieldDescriptorProto_TYPE_BYTES
		bol = descriptorpb.FieldDescriptorProto_TYPE_BOOL
		msg = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	nested := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	request := &descriptorpb.DescriptorProto{
		Name: proto.String("Request"),
		NestedType: []*descriptorpb.DescriptorProto{
			nested("InitQuoteExRequest", field("att_key_id", 1, byt, ""), field("b_pub_key_id", 3, bol, ""), field("buf_size", 4, u64, ""), field("timeout", 9, u32, "")),
			nested("GetQuoteSizeExRequest", field("att_key_id", 1, byt, ""), field("timeout", 9, u32, "")),
			nested("GetQuoteExRequest", field("report", 1, byt, ""), field("att_key_id", 2, byt, ""), field("qe_report_info", 3, byt, ""), field("buf_size", 4, u32, ""), field("timeout", 9, u32, "")),
			nested("GetSupportedAttKeyIDNumRequest", field("timeout", 9, u32, "")),
			nested("GetSupportedAttKeyIDsRequest", field("buf_size", 1, u32, ""), field("timeout", 9, u32, "")),
		},
		Field: []*descriptorpb.FieldDescriptorProto{
			field("initQuoteExReq", 15, msg, ".aesm.message.Request.InitQuoteExRequest"),
			field("getQuoteSizeExReq", 16, msg, ".aesm.message.Request.GetQuoteSizeExRequest"),
			field("getQuoteExReq", 17, msg, ".aesm.message.Request.GetQuoteExRequest"),
			field("getSupportedAttKeyIDNumReq", 21, msg, ".aesm.message.Request.GetSupportedAttKeyIDNumRequest"),
			field("getSupportedAttKeyIDsReq", 22, msg, ".aesm.message.Request.GetSupportedAttKeyIDsRequest"),
		},
	}
	response := &descriptorpb.DescriptorProto{
		Name: proto.String("Response"),
		NestedType: []*descriptorpb.DescriptorProto{
			nested("InitQuoteExResponse", field("errorCode", 1, u32, ""), field("target_info", 2, byt, ""), field("pub_key_id_size", 3, u64, ""), field("pub_key_id", 4, byt, "")),
			nested("GetQuoteSizeExResponse", field("errorCode", 1, u32, ""), field("quote_size", 2, u32, "")),
			nested("GetQuoteExResponse", field("errorCode", 1, u32, ""), field("quote", 2, byt, ""), field("qe_report_info", 3, byt, "")),
			nested("UnsupportedRequestResponse", field("errorCode", 1, u32, "")),
			nested("GetSupportedAttKeyIDNumResponse", field("errorCode", 1, u32, ""), field("att_key_id_num", 2, u32, "")),
			nested("GetSupportedAttKeyIDsResponse", field("errorCode", 1, u32, ""), field("att_key_ids", 2, byt, "")),
		},
		Field: []*descriptorpb.FieldDescriptorProto{
			field("initQuoteExRes", 15, msg, ".aesm.message.Response.InitQuoteExResponse"),
			field("getQuoteSizeExRes", 16, msg, ".aesm.message.Response.GetQuoteSizeExResponse"),
			field("getQuoteExRes", 17, msg, ".aesm.message.Response.GetQuoteExResponse"),
			field("unsupportedRequestResponse", 20, msg, ".aesm.message.Response.UnsupportedRequestResponse"),
			field("getSupportedAttKeyIDNumRes", 21, msg, ".aesm.message.Response.GetSupportedAttKeyIDNumResponse"),
			field("getSupportedAttKeyIDsRes", 22, msg, ".aesm.message.Response.GetSupportedAttKeyIDsResponse"),
		},
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("messages.proto"), Package: proto.String("aesm.message"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{request, response},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Request"), fd.Messages().ByName("Response")
}

// Requests this package writes are what protobuf reads them as.
func TestRequestsAsProtobufReadsThem(t *testing.T) {
	reqDesc, _ := messagesProto(t)
	m := NewMessage(KindGetQuoteEx)
	m.Bytes[fieldGQReport] = bytes.Repeat([]byte{7}, ReportSize)
	m.Bytes[fieldGQAttKeyID] = []byte{1, 2}
	m.Varint[fieldGQBufSize] = 5000
	m.Varint[fieldTimeout] = 1_000_000
	dyn := dynamicpb.NewMessage(reqDesc)
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(m.Marshal(), dyn); err != nil {
		t.Fatal(err)
	}
	sub := dyn.Get(reqDesc.Fields().ByNumber(17)).Message()
	fields := sub.Descriptor().Fields()
	if got := sub.Get(fields.ByName("report")).Bytes(); !bytes.Equal(got, m.Bytes[fieldGQReport]) {
		t.Errorf("report %x", got)
	}
	if sub.Get(fields.ByName("buf_size")).Uint() != 5000 || sub.Get(fields.ByName("timeout")).Uint() != 1_000_000 {
		t.Errorf("request %v", sub)
	}
	if len(dyn.GetUnknown()) != 0 || len(sub.GetUnknown()) != 0 {
		t.Errorf("fields protobuf does not know: %x %x", dyn.GetUnknown(), sub.GetUnknown())
	}

	// b_pub_key_id, a bool, goes as the varint protobuf reads.
	iq := NewMessage(KindInitQuoteEx)
	iq.Bytes[fieldIQAttKeyID] = []byte{9}
	iq.Varint[fieldIQPubKeyID] = 1
	iq.Varint[fieldIQBufSize] = 32
	dyn = dynamicpb.NewMessage(reqDesc)
	if err := proto.Unmarshal(iq.Marshal(), dyn); err != nil {
		t.Fatal(err)
	}
	sub = dyn.Get(reqDesc.Fields().ByNumber(15)).Message()
	if !sub.Get(sub.Descriptor().Fields().ByName("b_pub_key_id")).Bool() || sub.Get(sub.Descriptor().Fields().ByName("buf_size")).Uint() != 32 {
		t.Errorf("InitQuoteEx %v", sub)
	}
}

// Responses protobuf writes are what this package reads.
func TestResponsesAsProtobufWritesThem(t *testing.T) {
	_, respDesc := messagesProto(t)
	dyn := dynamicpb.NewMessage(respDesc)
	fd := respDesc.Fields().ByNumber(15)
	sub := dyn.Mutable(fd).Message()
	f := sub.Descriptor().Fields()
	sub.Set(f.ByName("errorCode"), protoreflect.ValueOfUint32(0))
	sub.Set(f.ByName("target_info"), protoreflect.ValueOfBytes(bytes.Repeat([]byte{3}, TargetInfoSize)))
	sub.Set(f.ByName("pub_key_id_size"), protoreflect.ValueOfUint64(32))
	raw, err := proto.Marshal(dyn)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeResponse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindInitQuoteEx || len(m.Bytes[fieldIQTargetInfo]) != TargetInfoSize || m.Varint[fieldIQPubKeyIDSize] != 32 || m.Varint[fieldErrorCode] != 0 {
		t.Errorf("decoded %+v", m)
	}
}

func TestDecodeRefuses(t *testing.T) {
	ok := NewMessage(KindGetQuoteSizeEx)
	ok.Varint[fieldErrorCode] = 0
	ok.Varint[fieldQSQuoteSize] = 4000
	good := ok.Marshal()
	if _, err := DecodeResponse(good); err != nil {
		t.Fatal(err)
	}
	dup := append([]byte(nil), good...)
	dup = protowire.AppendTag(dup[:0], KindGetQuoteSizeEx, protowire.BytesType)
	inner := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 0)
	inner = protowire.AppendVarint(protowire.AppendTag(inner, 1, protowire.VarintType), 3)
	dup = protowire.AppendBytes(dup, inner)
	wrongType := protowire.AppendBytes(protowire.AppendTag(nil, KindGetQuoteSizeEx, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0}))
	noCode := NewMessage(KindGetQuoteSizeEx)
	noCode.Varint[fieldQSQuoteSize] = 1
	twoMessages := append(append([]byte(nil), good...), good...)
	epid := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), nil) // GetQuoteResponse (EPID)
	for _, tc := range []struct {
		name string
		raw  []byte
		says string
	}{
		{"empty", nil, "aesm response"},
		{"field twice", dup, "field 1 twice"},
		{"wrong wire type", wrongType, "field 1 has wire type 2, want 0"},
		{"no error code", noCode.Marshal(), "no errorCode"},
		{"two messages", twoMessages, "bytes after its one message"},
		{"an EPID message", epid, "field 2 (wire type 2) is not a DCAP message"},
		{"truncated", good[:len(good)-1], "aesm response"},
		{"too large", make([]byte, MaxMessage+1), "more than"},
	} {
		if _, err := DecodeResponse(tc.raw); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.says)
		}
	}
}

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrame(&b, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), []byte{3, 0, 0, 0, 'a', 'b', 'c'}) {
		t.Errorf("frame %x", b.Bytes())
	}
	if got, err := ReadFrame(&b); err != nil || string(got) != "abc" {
		t.Errorf("%q %v", got, err)
	}
	huge := binary.LittleEndian.AppendUint32(nil, MaxMessage+1)
	if _, err := ReadFrame(bytes.NewReader(huge)); err == nil || !strings.Contains(err.Error(), "announced") {
		t.Errorf("huge: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{5, 0, 0, 0, 1})); err == nil {
		t.Error("short frame read")
	}
}

// Whatever decodes re-encodes to a message that decodes the same.
func FuzzDecodeResponse(f *testing.F) {
	m := NewMessage(KindInitQuoteEx)
	m.Varint[fieldErrorCode] = 0
	m.Bytes[fieldIQTargetInfo] = make([]byte, TargetInfoSize)
	f.Add(m.Marshal())
	q := NewMessage(KindGetQuoteEx)
	q.Varint[fieldErrorCode] = 44
	f.Add(q.Marshal())
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := DecodeResponse(raw)
		if err != nil {
			return
		}
		again, err := DecodeResponse(m.Marshal())
		if err != nil || again.Kind != m.Kind || len(again.Varint) != len(m.Varint) || len(again.Bytes) != len(m.Bytes) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	m := NewMessage(KindGetQuoteEx)
	m.Bytes[fieldGQReport] = make([]byte, ReportSize)
	m.Varint[fieldGQBufSize] = 5000
	f.Add(m.Marshal())
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := DecodeRequest(raw)
		if err != nil {
			return
		}
		if _, err := DecodeRequest(m.Marshal()); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
