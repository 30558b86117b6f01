// Package aesmtest is a fake AESM for tests: it speaks AESM's protocol on
// a unix socket (decoding requests as strictly as the client decodes
// responses) and answers DCAP requests with a quoting enclave under a
// test root (producetest.SGXSigner), so LAS's real AESM client runs
// against it. It cannot check a REPORT's MAC, which only the CPU's report
// key can: it quotes whatever report body it is handed.
package aesmtest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/las/aesm"
)

// Server is the fake AESM.
type Server struct {
	Signer *producetest.SGXSigner

	mu sync.Mutex
	// fail answers requests of a kind with an error code.
	fail map[protowire.Number]aesm.Code
	// noECDSA offers an EPID key id only.
	noECDSA bool
	// quotes counts the quotes made.
	quotes int
}

// Key ids: an EPID one and the ECDSA one, as AESM lists them.
var (
	epidKey  = keyID(0)
	ecdsaKey = keyID(2)
)

func keyID(alg uint32) []byte {
	id := make([]byte, aesm.KeyIDSize)
	binary.LittleEndian.PutUint16(id[4:], 32) // MRSIGNER length
	binary.LittleEndian.PutUint32(id[154:], alg)
	return id
}

// Fail makes requests of kind answer code (Success: answer again).
func (s *Server) Fail(kind protowire.Number, code aesm.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail == nil {
		s.fail = map[protowire.Number]aesm.Code{}
	}
	s.fail[kind] = code
}

// NoECDSA makes AESM offer its EPID key only (an AESM without DCAP).
func (s *Server) NoECDSA(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noECDSA = on
}

// Quotes is how many quotes the server made.
func (s *Server) Quotes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quotes
}

// Start serves on a new socket (Listen) and returns its path; the
// server stops with the test.
func Start(tb testing.TB, signer *producetest.SGXSigner) (string, *Server) {
	tb.Helper()
	path, lis := Listen(tb)
	s := &Server{Signer: signer}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx, lis) }()
	tb.Cleanup(func() { cancel(); <-done })
	return path, s
}

// Listen listens on a new unix socket in a short folder of its own (a
// socket path has at most 107 bytes, which t.TempDir can exceed), removed
// with the test.
func Listen(tb testing.TB) (string, net.Listener) {
	tb.Helper()
	dir, err := os.MkdirTemp("", "aesm")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "aesm.socket")
	lis, err := net.Listen("unix", path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = lis.Close() })
	return path, lis
}

// Serve answers connections on lis until ctx ends, one request each.
func (s *Server) Serve(ctx context.Context, lis net.Listener) {
	go func() { <-ctx.Done(); _ = lis.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = conn.Close() }()
			raw, err := aesm.ReadFrame(conn)
			if err != nil {
				return
			}
			_ = aesm.WriteFrame(conn, s.Answer(raw).Marshal())
		}()
	}
}

// Answer is the response to one encoded request.
func (s *Server) Answer(raw []byte) *aesm.Message {
	req, err := aesm.DecodeRequest(raw)
	if err != nil {
		// AESM answers what it cannot parse with this message.
		return response(aesm.KindUnsupported, aesm.MsgError)
	}
	s.mu.Lock()
	code, failing := s.fail[req.Kind]
	noECDSA := s.noECDSA
	s.mu.Unlock()
	if failing && code != aesm.Success {
		return response(req.Kind, code)
	}
	switch req.Kind {
	case aesm.KindGetSupportedAttKeyIDNum:
		r := response(req.Kind, aesm.Success)
		r.Varint[2] = uint64(len(s.keys(noECDSA)) / aesm.KeyIDSize)
		return r
	case aesm.KindGetSupportedAttKeyIDs:
		keys := s.keys(noECDSA)
		if req.Varint[1] != uint64(len(keys)) {
			return response(req.Kind, aesm.ParameterError)
		}
		r := response(req.Kind, aesm.Success)
		r.Bytes[2] = keys
		return r
	case aesm.KindInitQuoteEx:
		if code := s.keyCheck(req.Bytes[1], noECDSA); code != aesm.Success {
			return response(req.Kind, code)
		}
		r := response(req.Kind, aesm.Success)
		r.Bytes[2] = s.Signer.TargetInfo()
		r.Varint[3] = sha256.Size
		if req.Varint[3] != 0 {
			if req.Varint[4] != sha256.Size {
				return response(req.Kind, aesm.ParameterError)
			}
			pub := sha256.Sum256(s.Signer.Root().Raw)
			r.Bytes[4] = pub[:]
		}
		return r
	case aesm.KindGetQuoteSizeEx:
		if code := s.keyCheck(req.Bytes[1], noECDSA); code != aesm.Success {
			return response(req.Kind, code)
		}
		q, err := s.Signer.Quote(make([]byte, 384))
		if err != nil {
			return response(req.Kind, aesm.UnexpectedError)
		}
		r := response(req.Kind, aesm.Success)
		// AESM's size leaves room; the client trims the zeros after the
		// quote.
		r.Varint[2] = uint64(len(q) + 64)
		return r
	case aesm.KindGetQuoteEx:
		if code := s.keyCheck(req.Bytes[2], noECDSA); code != aesm.Success {
			return response(req.Kind, code)
		}
		report := req.Bytes[1]
		if len(report) != aesm.ReportSize {
			return response(req.Kind, aesm.InvalidReport)
		}
		q, err := s.Signer.Quote(report[:384])
		if err != nil {
			return response(req.Kind, aesm.UnexpectedError)
		}
		size := req.Varint[4]
		if size < uint64(len(q)) || size > aesm.MaxMessage/2 {
			return response(req.Kind, aesm.ParameterError)
		}
		s.mu.Lock()
		s.quotes++
		s.mu.Unlock()
		r := response(req.Kind, aesm.Success)
		r.Bytes[2] = append(q, make([]byte, int(size)-len(q))...)
		return r
	}
	return response(aesm.KindUnsupported, aesm.UnexpectedError)
}

func (s *Server) keys(noECDSA bool) []byte {
	if noECDSA {
		return epidKey
	}
	return append(append([]byte(nil), epidKey...), ecdsaKey...)
}

// keyCheck is AESM's answer to a request for key id: an EPID key (or
// none) is not what the DCAP requests take.
func (s *Server) keyCheck(id []byte, noECDSA bool) aesm.Code {
	switch {
	case len(id) != aesm.KeyIDSize:
		return aesm.ParameterError
	case noECDSA || string(id) != string(ecdsaKey):
		return aesm.UnsupportedAttKeyID
	}
	return aesm.Success
}

func response(kind protowire.Number, code aesm.Code) *aesm.Message {
	m := aesm.NewMessage(kind)
	m.Varint[1] = uint64(code)
	return m
}
