package las

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	"github.com/cloister-cc/cloister/internal/las/aesm/aesmtest"
	"github.com/cloister-cc/cloister/internal/las/lasclient"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// readyDevice is a device folder whose sgx_enclave unprivileged enclaves
// can open.
func readyDevice(t *testing.T) string {
	t.Helper()
	dev := t.TempDir()
	device := filepath.Join(dev, "sgx_enclave")
	if err := os.WriteFile(device, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(device, 0o666); err != nil {
		t.Fatal(err)
	}
	return dev
}

// call sends body (a string as it is, anything else as JSON; nil: none).
func call(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// An enclave's REPORT, posted to LAS, comes back as a DCAP quote of the
// node's quoting enclave (the fake AESM's, under a test root) that
// carries the REPORT's report data; report data alone is refused.
func TestDCAPQuotesReports(t *testing.T) {
	signer, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sock, _ := aesmtest.Start(t, signer)
	s := &Server{Probe: &Probe{DevRoot: readyDevice(t)}, DCAP: &DCAP{Client: &aesm.Client{Socket: sock}}}
	if st := s.Status(); st.Ready || st.Check != laswire.CheckAESM || !strings.Contains(st.Reason, "not checked yet") {
		t.Errorf("before the first check: %+v", st)
	}
	if err := s.Probe.Check(); err != nil {
		t.Fatal(err)
	}
	if err := s.DCAP.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); !st.Ready || st.Evidence != laswire.EvidenceSGXDCAP {
		t.Errorf("status %+v", st)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	// Through the client workloads use.
	lc := &lasclient.Client{URL: ts.URL}
	ti, err := lc.TargetInfo(context.Background())
	if err != nil || !bytes.Equal(ti, signer.TargetInfo()) {
		t.Fatalf("target info %x: %v", ti, err)
	}
	report := make([]byte, aesm.ReportSize)
	copy(report[320:], "the enclave's key hash")
	ev, err := lc.QuoteReport(context.Background(), report)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := signer.Verify(ev.Raw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != "sgx" || !bytes.HasPrefix(claims.ReportData, []byte("the enclave's key hash")) || !claims.TestRoot {
		t.Errorf("claims %+v", claims)
	}

	for _, tc := range []struct {
		name, method, path string
		body               any
		code               int
		says               string
	}{
		{"report data alone", "POST", "/v1/evidence", laswire.EvidenceRequest{ReportData: []byte{1}}, 409, "POSTs it to /v1/sgx/quote"},
		{"short report", "POST", "/v1/sgx/quote", laswire.QuoteRequest{Report: make([]byte, 384)}, 400, "an SGX REPORT has 432"},
		{"unknown field", "POST", "/v1/sgx/quote", map[string]any{"report": report, "reportData": "aa"}, 400, "unknown field"},
	} {
		if code, body := call(t, tc.method, ts.URL+tc.path, tc.body); code != tc.code || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, code, body, tc.code, tc.says)
		}
	}
}

// Without AESM, or with an AESM that cannot quote, LAS is not ready and
// its status names what is missing.
func TestDCAPNotReady(t *testing.T) {
	signer, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(*aesmtest.Server) string // returns the socket to use; "" the fake's
		check string
		says  string
	}{
		{"no socket", func(*aesmtest.Server) string { return "/nonexistent/aesm.socket" }, laswire.CheckAESMSocket, "/nonexistent/aesm.socket"},
		{"no ECDSA key", func(s *aesmtest.Server) string { s.NoECDSA(true); return "" }, laswire.CheckECDSAKey, "no ECDSA attestation key"},
		{"not registered", func(s *aesmtest.Server) string { s.Fail(aesm.KindInitQuoteEx, aesm.NoPlatformCertData); return "" },
			laswire.CheckPlatformRegistration, "AESM_NO_PLATFORM_CERT_DATA"},
		{"no device", func(s *aesmtest.Server) string {
			s.Fail(aesm.KindGetSupportedAttKeyIDNum, aesm.NoDeviceError)
			return ""
		},
			laswire.CheckSGXDevice, "AESM_NO_DEVICE_ERROR"},
		{"busy", func(s *aesmtest.Server) string { s.Fail(aesm.KindInitQuoteEx, aesm.Busy); return "" }, laswire.CheckAESM, "AESM_BUSY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, fake := aesmtest.Start(t, signer)
			if other := tc.setup(fake); other != "" {
				sock = other
			}
			s := &Server{Probe: &Probe{DevRoot: readyDevice(t)}, DCAP: &DCAP{Client: &aesm.Client{Socket: sock, Timeout: 2 * time.Second}}}
			_ = s.Probe.Check()
			if err := s.DCAP.Check(context.Background()); err == nil {
				t.Fatal("check passed")
			}
			st := s.Status()
			if st.Ready || st.Check != tc.check || !strings.Contains(st.Reason, tc.says) {
				t.Errorf("status %+v, want check %s saying %q", st, tc.check, tc.says)
			}
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()
			if code, body := call(t, "GET", ts.URL+"/readyz", nil); code != 503 || !strings.Contains(string(body), tc.check) {
				t.Errorf("/readyz %d %s", code, body)
			}
		})
	}
}

// cloister-las without simulation quotes through the AESM socket it is
// given, and is ready only while AESM answers.
func TestRunWithAESM(t *testing.T) {
	signer, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sock, fake := aesmtest.Start(t, signer)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Port: port, DevRoot: readyDevice(t), ProbeInterval: time.Second, AESMSocket: sock}, slog.New(slog.DiscardHandler))
	}()
	status := func(wantReady bool) laswire.Status {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/status", port))
			var st laswire.Status
			if err == nil {
				_ = json.NewDecoder(resp.Body).Decode(&st)
				_ = resp.Body.Close()
				if st.Ready == wantReady && st.Evidence == laswire.EvidenceSGXDCAP {
					return st
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never ready=%v: %+v %v", wantReady, st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	status(true)
	fake.Fail(aesm.KindInitQuoteEx, aesm.NoPlatformCertData)
	if st := status(false); st.Check != laswire.CheckPlatformRegistration {
		t.Errorf("status %+v", st)
	}
	fake.Fail(aesm.KindInitQuoteEx, aesm.Success)
	status(true)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
