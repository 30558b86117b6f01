package aesm_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	"github.com/cloister-cc/cloister/internal/las/aesm/aesmtest"
)

func signer(t *testing.T) *producetest.SGXSigner {
	t.Helper()
	s, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// report is an enclave's REPORT: a body with report data, then a key id
// and MAC the fake cannot check.
func report(reportData string) []byte {
	r := make([]byte, aesm.ReportSize)
	copy(r[48:], []byte{0x04, 0, 0, 0, 0, 0, 0, 0, 0x03})
	copy(r[64:], bytes.Repeat([]byte{0xe1}, 32))
	copy(r[320:], reportData)
	return r
}

// The client finds the ECDSA key, reads the QE's target info, and gets a
// quote of a REPORT that verifies under the test root with the REPORT's
// report data.
func TestQuoteThroughAESM(t *testing.T) {
	s := signer(t)
	sock, srv := aesmtest.Start(t, s)
	c := &aesm.Client{Socket: sock, Timeout: 5 * time.Second}
	ctx := context.Background()
	key, err := c.ECDSAKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := c.TargetInfo(ctx, key)
	if err != nil || !bytes.Equal(ti, s.TargetInfo()) {
		t.Fatalf("target info %x: %v", ti, err)
	}
	q, err := c.Quote(ctx, key, report("bound by the enclave"))
	if err != nil {
		t.Fatal(err)
	}
	claims, err := s.Verify(q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(claims.ReportData, []byte("bound by the enclave")) || !claims.TestRoot || claims.SGX.MRENCLAVE[0] != 0xe1 {
		t.Errorf("claims %+v", claims)
	}
	if srv.Quotes() != 1 {
		t.Errorf("%d quotes made", srv.Quotes())
	}
}

func TestAESMErrors(t *testing.T) {
	s := signer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		setup   func(*aesmtest.Server)
		socket  string // "" the fake's
		call    func(*aesm.Client) error
		problem aesm.Problem
		says    string
	}{
		{"no socket", nil, filepath.Join(t.TempDir(), "none.socket"), func(c *aesm.Client) error { _, err := c.ECDSAKey(ctx); return err },
			aesm.ProblemNoSocket, "none.socket (is aesmd running"},
		{"EPID only", func(s *aesmtest.Server) { s.NoECDSA(true) }, "", func(c *aesm.Client) error { _, err := c.ECDSAKey(ctx); return err },
			aesm.ProblemNoECDSAKey, "no ECDSA attestation key"},
		{"key count fails", func(s *aesmtest.Server) { s.Fail(aesm.KindGetSupportedAttKeyIDNum, aesm.ServiceUnavailable) }, "",
			func(c *aesm.Client) error { _, err := c.ECDSAKey(ctx); return err }, aesm.ProblemOther, "GetSupportedAttKeyIDNum: AESM_SERVICE_UNAVAILABLE (30)"},
		{"not registered", func(s *aesmtest.Server) { s.Fail(aesm.KindInitQuoteEx, aesm.NoPlatformCertData) }, "",
			func(c *aesm.Client) error { return targetInfo(ctx, c) }, aesm.ProblemNotRegistered, "InitQuoteEx: AESM_NO_PLATFORM_CERT_DATA (44)"},
		{"unrecognized platform", func(s *aesmtest.Server) { s.Fail(aesm.KindInitQuoteEx, aesm.UnrecognizedPlatform) }, "",
			func(c *aesm.Client) error { return targetInfo(ctx, c) }, aesm.ProblemNotRegistered, "AESM_UNRECOGNIZED_PLATFORM"},
		{"key not initialized", func(s *aesmtest.Server) { s.Fail(aesm.KindInitQuoteEx, aesm.AttKeyNotInitialized) }, "",
			func(c *aesm.Client) error { return targetInfo(ctx, c) }, aesm.ProblemNoECDSAKey, "AESM_ATT_KEY_NOT_INITIALIZED"},
		{"no device", func(s *aesmtest.Server) { s.Fail(aesm.KindGetQuoteSizeEx, aesm.NoDeviceError) }, "",
			func(c *aesm.Client) error { return quote(ctx, c, report("x")) }, aesm.ProblemNoDevice, "GetQuoteSizeEx: AESM_NO_DEVICE_ERROR (2)"},
		{"invalid report", func(s *aesmtest.Server) { s.Fail(aesm.KindGetQuoteEx, aesm.InvalidReport) }, "",
			func(c *aesm.Client) error { return quote(ctx, c, report("x")) }, aesm.ProblemOther, "GetQuoteEx: AESM_INVALID_REPORT (47)"},
		{"out of EPC", func(s *aesmtest.Server) { s.Fail(aesm.KindGetQuoteEx, aesm.OutOfEPC) }, "",
			func(c *aesm.Client) error { return quote(ctx, c, report("x")) }, aesm.ProblemOther, "AESM_OUT_OF_EPC"},
		{"unknown code", func(s *aesmtest.Server) { s.Fail(aesm.KindGetQuoteEx, 900) }, "",
			func(c *aesm.Client) error { return quote(ctx, c, report("x")) }, aesm.ProblemOther, "AESM error 900 (900)"},
		{"short report", nil, "", func(c *aesm.Client) error { return quote(ctx, c, make([]byte, 384)) }, aesm.ProblemOther, "an SGX REPORT has 432"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, srv := aesmtest.Start(t, s)
			if tc.setup != nil {
				tc.setup(srv)
			}
			if tc.socket != "" {
				sock = tc.socket
			}
			err := tc.call(&aesm.Client{Socket: sock, Timeout: 5 * time.Second})
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v, want %q", err, tc.says)
			}
			if p := aesm.ProblemOf(err); p != tc.problem {
				t.Errorf("problem %d, want %d", p, tc.problem)
			}
		})
	}
}

func targetInfo(ctx context.Context, c *aesm.Client) error {
	key, err := c.ECDSAKey(ctx)
	if err == nil {
		_, err = c.TargetInfo(ctx, key)
	}
	return err
}

func quote(ctx context.Context, c *aesm.Client, r []byte) error {
	key, err := c.ECDSAKey(ctx)
	if err == nil {
		_, err = c.Quote(ctx, key, r)
	}
	return err
}

// An AESM that answers a request with UnsupportedRequestResponse (a PSW
// without DCAP) is named as such.
func TestUnsupportedRequest(t *testing.T) {
	sock := serveOnce(t, func([]byte) []byte {
		m := aesm.NewMessage(aesm.KindUnsupported)
		m.Varint[1] = uint64(aesm.UnexpectedError)
		return m.Marshal()
	})
	_, err := (&aesm.Client{Socket: sock}).ECDSAKey(context.Background())
	if !errors.Is(err, aesm.ErrUnsupported) || aesm.ProblemOf(err) != aesm.ProblemNoECDSAKey {
		t.Errorf("err %v", err)
	}
}

// A response that is not what was asked, or cannot be decoded, is an
// error naming it; a quote with non-zero bytes after its length is
// refused.
func TestBadResponses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func([]byte) []byte
		says   string
	}{
		{"other kind", func([]byte) []byte {
			m := aesm.NewMessage(aesm.KindGetQuoteEx)
			m.Varint[1] = 0
			return m.Marshal()
		}, "answered with message 17, asked 21"},
		{"unknown field", func([]byte) []byte {
			m := aesm.NewMessage(aesm.KindGetSupportedAttKeyIDNum)
			m.Varint[1], m.Varint[7] = 0, 1
			return m.Marshal()
		}, "unknown field 7"},
		{"garbage", func([]byte) []byte { return []byte{0xff, 0xff} }, "aesm response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&aesm.Client{Socket: serveOnce(t, tc.answer)}).ECDSAKey(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err %v, want %q", err, tc.says)
			}
		})
	}
}

// serveOnce answers every connection with answer(request).
func serveOnce(t *testing.T, answer func([]byte) []byte) string {
	t.Helper()
	sock, lis := aesmtest.Listen(t)
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			raw, err := aesm.ReadFrame(conn)
			if err == nil {
				_ = aesm.WriteFrame(conn, answer(raw))
			}
			_ = conn.Close()
		}
	}()
	return sock
}

// BenchmarkQuote is one quote of a REPORT through AESM's protocol (two
// requests on their own connections), against the fake AESM, whose own
// signing is in the time too.
func BenchmarkQuote(b *testing.B) {
	s, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		b.Fatal(err)
	}
	sock, _ := aesmtest.Start(b, s)
	c := &aesm.Client{Socket: sock}
	key, err := c.ECDSAKey(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	r := report("bench")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Quote(context.Background(), key, r); err != nil {
			b.Fatal(err)
		}
	}
}
