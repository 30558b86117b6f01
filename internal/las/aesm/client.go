// Package aesm is a client of Intel's AESM service (aesmd) for DCAP: it
// finds the ECDSA attestation key, reads the quoting enclave's target
// info, and has the quoting enclave turn an enclave's REPORT into a DCAP
// quote, over AESM's unix socket in its own protocol (wire.go), in pure
// Go. Every response is decoded strictly and bounded.
package aesm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/sgx"
)

// DefaultSocket is where aesmd listens.
const DefaultSocket = "/var/run/aesmd/aesm.socket"

// Sizes of the SGX structures passed through.
const (
	KeyIDSize      = 256 // sgx_att_key_id_ext_t
	TargetInfoSize = 512 // TARGETINFO
	ReportSize     = 432 // REPORT: body, key id, MAC
)

// algECDSAP256 is sgx_ql_attestation_algorithm_id_t's ECDSA-P256, at
// offset 154 of a key id.
const (
	algECDSAP256 = 2
	offAlgorithm = 154
)

// maxKeys bounds the key ids asked for: AESM offers EPID and ECDSA.
const maxKeys = 16

// ErrNoECDSAKey is the error of an AESM that offers no ECDSA (DCAP) attestation key.
var ErrNoECDSAKey = errors.New("aesm offers no ECDSA attestation key: install the DCAP quoting enclave (libsgx-dcap-ql, libsgx-aesm-ecdsa-plugin) on the node")

// ErrUnsupported is the error of an AESM that answered a request with
// UnsupportedRequestResponse.
var ErrUnsupported = errors.New("aesm does not support DCAP requests: update the node's SGX PSW (aesmd)")

// Client talks to one AESM socket.
type Client struct {
	Socket string
	// Timeout bounds each request, and is sent to AESM as its own.
	Timeout time.Duration
}

// ECDSAKey returns the ECDSA attestation key id AESM offers.
func (c *Client) ECDSAKey(ctx context.Context) ([]byte, error) {
	resp, err := c.call(ctx, "GetSupportedAttKeyIDNum", NewMessage(KindGetSupportedAttKeyIDNum))
	if err != nil {
		return nil, err
	}
	n := resp.Varint[fieldKeyNum]
	if n == 0 {
		return nil, ErrNoECDSAKey
	}
	if n > maxKeys {
		return nil, fmt.Errorf("aesm GetSupportedAttKeyIDNum: %d keys, more than %d", n, maxKeys)
	}
	req := NewMessage(KindGetSupportedAttKeyIDs)
	req.Varint[fieldKeyIDsBufSize] = n * KeyIDSize
	if resp, err = c.call(ctx, "GetSupportedAttKeyIDs", req); err != nil {
		return nil, err
	}
	ids := resp.Bytes[fieldKeyIDs]
	if uint64(len(ids)) != n*KeyIDSize {
		return nil, fmt.Errorf("aesm GetSupportedAttKeyIDs: %d bytes, want %d key ids of %d", len(ids), n, KeyIDSize)
	}
	// An EPID-only AESM may list an ECDSA key id it cannot use (Intel's
	// linux-sgx issue 536): InitQuoteEx then fails, and says so.
	for i := 0; i < len(ids); i += KeyIDSize {
		id := ids[i : i+KeyIDSize]
		if binary.LittleEndian.Uint32(id[offAlgorithm:]) == algECDSAP256 {
			return id, nil
		}
	}
	return nil, ErrNoECDSAKey
}

// TargetInfo returns the quoting enclave's TARGETINFO for key: what an
// enclave targets its REPORT at. It initializes the key, which needs the
// platform's PCK certificate.
func (c *Client) TargetInfo(ctx context.Context, key []byte) ([]byte, error) {
	// First the size of the public key id, then the target info with a
	// buffer of that size (AESM's protocol asks for both).
	req := NewMessage(KindInitQuoteEx)
	req.Bytes[fieldIQAttKeyID] = key
	req.Varint[fieldIQPubKeyID] = 0
	resp, err := c.call(ctx, "InitQuoteEx", req)
	if err != nil {
		return nil, err
	}
	size := resp.Varint[fieldIQPubKeyIDSize]
	if size == 0 || size > 4096 {
		return nil, fmt.Errorf("aesm InitQuoteEx: public key id size %d, want 1..4096", size)
	}
	req.Varint[fieldIQPubKeyID] = 1
	req.Varint[fieldIQBufSize] = size
	if resp, err = c.call(ctx, "InitQuoteEx", req); err != nil {
		return nil, err
	}
	ti := resp.Bytes[fieldIQTargetInfo]
	if len(ti) != TargetInfoSize {
		return nil, fmt.Errorf("aesm InitQuoteEx: target info of %d bytes, want %d", len(ti), TargetInfoSize)
	}
	return ti, nil
}

// Quote has the quoting enclave sign an enclave's REPORT (targeted at
// its TargetInfo) into a DCAP quote.
func (c *Client) Quote(ctx context.Context, key, report []byte) ([]byte, error) {
	if len(report) != ReportSize {
		return nil, fmt.Errorf("report of %d bytes, an SGX REPORT has %d", len(report), ReportSize)
	}
	req := NewMessage(KindGetQuoteSizeEx)
	req.Bytes[fieldQSAttKeyID] = key
	resp, err := c.call(ctx, "GetQuoteSizeEx", req)
	if err != nil {
		return nil, err
	}
	size := resp.Varint[fieldQSQuoteSize]
	if size < 436 || size > MaxMessage/2 {
		return nil, fmt.Errorf("aesm GetQuoteSizeEx: quote size %d, want 436..%d", size, MaxMessage/2)
	}
	req = NewMessage(KindGetQuoteEx)
	req.Bytes[fieldGQReport] = report
	req.Bytes[fieldGQAttKeyID] = key
	req.Varint[fieldGQBufSize] = size
	if resp, err = c.call(ctx, "GetQuoteEx", req); err != nil {
		return nil, err
	}
	q := resp.Bytes[fieldGQQuote]
	if uint64(len(q)) != size {
		return nil, fmt.Errorf("aesm GetQuoteEx: quote of %d bytes, %d announced", len(q), size)
	}
	q, err = sgx.TrimQuote(q)
	if err != nil {
		return nil, fmt.Errorf("aesm GetQuoteEx: %w", err)
	}
	return q, nil
}

// call sends one request on its own connection and returns the response
// of the same kind, or the error AESM answered.
func (c *Client) call(ctx context.Context, op string, req *Message) (*Message, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	req.Varint[fieldTimeout] = uint64(timeout / time.Microsecond)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, &DialError{Socket: c.Socket, Err: err}
	}
	defer func() { _ = conn.Close() }()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if err := WriteFrame(conn, req.Marshal()); err != nil {
		return nil, fmt.Errorf("aesm %s: %w", op, err)
	}
	raw, err := ReadFrame(conn)
	if err != nil {
		return nil, fmt.Errorf("aesm %s: reading the response: %w", op, err)
	}
	resp, err := DecodeResponse(raw)
	if err != nil {
		return nil, err
	}
	if resp.Kind == KindUnsupported {
		return nil, fmt.Errorf("aesm %s: %w", op, ErrUnsupported)
	}
	if resp.Kind != req.Kind {
		return nil, fmt.Errorf("aesm %s: answered with message %d, asked %d", op, resp.Kind, req.Kind)
	}
	if code := resp.Varint[fieldErrorCode]; code != 0 {
		return nil, &Error{Op: op, Code: Code(min(code, 1<<32-1))}
	}
	return resp, nil
}

// DialError is the error of an AESM socket that cannot be reached.
type DialError struct {
	Socket string
	Err    error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("aesm: cannot reach %s (is aesmd running on the node, and its socket mounted?): %v", e.Socket, e.Err)
}
func (e *DialError) Unwrap() error { return e.Err }

// ProblemOf classifies an error of this client.
func ProblemOf(err error) Problem {
	var ae *Error
	var de *DialError
	switch {
	case err == nil:
		return ProblemNone
	case errors.As(err, &de):
		return ProblemNoSocket
	case errors.Is(err, ErrNoECDSAKey), errors.Is(err, ErrUnsupported):
		return ProblemNoECDSAKey
	case errors.As(err, &ae):
		return ae.Code.Problem()
	}
	return ProblemOther
}
