package las

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
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

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

func TestProbe(t *testing.T) {
	dev := t.TempDir()
	p := &Probe{DevRoot: dev}
	dev0 := filepath.Join(dev, "sgx_enclave")
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "is the SGX driver loaded") {
		t.Errorf("missing device: %v", err)
	}
	if err := os.WriteFile(dev0, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dev0, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "mode 0600: unprivileged enclaves cannot open it; make it 0666") {
		t.Errorf("0600 device: %v", err)
	}
	if err := os.Chmod(dev0, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err != nil || p.Err() != nil {
		t.Errorf("0666 device: %v", err)
	}
	if err := os.Remove(dev0); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dev0, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dev0, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "opening") {
		t.Errorf("a device that cannot be opened: %v", err)
	}
}

func server(t *testing.T, simulation bool) (*httptest.Server, *Probe, string) {
	dev := t.TempDir()
	p := &Probe{DevRoot: dev}
	s := &Server{Probe: p}
	keyFile := filepath.Join(t.TempDir(), "las.key")
	if simulation {
		k, err := keyfile.LoadOrCreate(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		s.Quoter = &sim.Quoter{Key: k}
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, p, keyFile
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	return call(t, http.MethodPost, url+"/v1/evidence", body)
}

func TestEvidenceInSimulation(t *testing.T) {
	ts, _, keyFile := server(t, true)
	code, body := post(t, ts.URL, `{"reportData":"aabbcc"}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var resp laswire.EvidenceResponse
	if err := json.Unmarshal(body, &resp); err != nil || resp.Type != attest.Sim {
		t.Fatalf("%s: %v", body, err)
	}
	// The published key is the one that signed; the claims are insecure
	// and carry the report data.
	kresp, err := http.Get(ts.URL + "/v1/simulation-key")
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, _ := io.ReadAll(kresp.Body)
	if err := kresp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sim.Verify(resp.Evidence, time.Now(), pub.(*ecdsa.PublicKey))
	if err != nil || !c.Insecure || c.ReportData.String() != "aabbcc" {
		t.Errorf("claims %+v: %v", c, err)
	}
	// The key survives a restart through --key-file.
	again, err := keyfile.LoadOrCreate(keyFile)
	if err != nil || !again.PublicKey.Equal(pub) {
		t.Errorf("reloaded key differs: %v", err)
	}
	if fi, _ := os.Stat(keyFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode())
	}
}

func TestEvidenceBadRequests(t *testing.T) {
	ts, _, _ := server(t, true)
	for body, want := range map[string]string{
		`{"reportData":"` + strings.Repeat("ab", 65) + `"}`: "reportData is 65 bytes: at most 64",
		`{"reportData":"aa","mrenclave":"bb"}`:              `mrenclave`,
		`{"reportData":"xyz"}`:                              "request body",
		strings.Repeat("a", 5000):                           "request body",
	} {
		code, b := post(t, ts.URL, body)
		if code != 400 || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%.40s: %d %s, want 400 %q", body, code, b, want)
		}
	}
	off, _, _ := server(t, false)
	if code, b := post(t, off.URL, `{"reportData":"aa"}`); code != 501 || !bytes.Contains(b, []byte("--simulation")) {
		t.Errorf("without simulation: %d %s", code, b)
	}
}

func TestReadyzFollowsTheProbe(t *testing.T) {
	ts, p, _ := server(t, true)
	get := func() (int, string) {
		resp, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := os.WriteFile(filepath.Join(p.DevRoot, "sgx_enclave"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(p.DevRoot, "sgx_enclave"), 0o000); err != nil {
		t.Fatal(err)
	}
	_ = p.Check() // fails: what /readyz reports
	if code, body := get(); code != 503 || !strings.Contains(body, "mode 0000") {
		t.Errorf("unreadable device: %d %s", code, body)
	}
	if err := os.Chmod(filepath.Join(p.DevRoot, "sgx_enclave"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(); code != 200 {
		t.Errorf("after chmod 0666: %d", code)
	}
}

func TestRunProbesAndServes(t *testing.T) {
	for _, cfg := range []Config{{Port: 0, ProbeInterval: time.Second}, {Port: 70000, ProbeInterval: time.Second}, {Port: laswire.DefaultPort, ProbeInterval: time.Millisecond}} {
		if err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // a network peer may have closed first
	dev := t.TempDir()
	device := filepath.Join(dev, "sgx_enclave")
	if err := os.WriteFile(device, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(device, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Port: port, DevRoot: dev, ProbeInterval: time.Second, Simulation: true}, slog.New(slog.DiscardHandler))
	}()
	ready := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
			if err == nil {
				if err := resp.Body.Close(); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode == want {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never answered %d (%v)", want, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ready(200)
	if err := os.Chmod(device, 0o000); err != nil {
		t.Fatal(err)
	} // the "LAS Unhealthy" case
	ready(503)
	if err := os.Chmod(device, 0o666); err != nil {
		t.Fatal(err)
	}
	ready(200)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A LAS that cannot produce evidence is not ready, whatever its device
// says, and its status names the missing part; in simulation it is ready
// and says its evidence is simulated.
func TestReadyOnlyWithEvidence(t *testing.T) {
	get := func(url string) (int, []byte) {
		resp, err := http.Get(url) //nolint:gosec // the test server's URL
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, simulation := range []bool{false, true} {
		ts, p, _ := server(t, simulation)
		device := filepath.Join(p.DevRoot, "sgx_enclave")
		if err := os.WriteFile(device, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(device, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := p.Check(); err != nil {
			t.Fatal(err)
		}
		code, body := get(ts.URL + "/readyz")
		_, raw := get(ts.URL + "/v1/status")
		var st laswire.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if simulation {
			if code != 200 || !st.Ready || st.Evidence != laswire.EvidenceSimulated {
				t.Errorf("simulation: /readyz %d %s, status %+v", code, body, st)
			}
			continue
		}
		if code != 503 || !strings.Contains(string(body), "evidence: this LAS cannot produce evidence") ||
			st.Ready || st.Check != laswire.CheckEvidence || st.Evidence != laswire.EvidenceNone || !strings.Contains(st.Reason, "simulation is off") {
			t.Errorf("without a quoter: /readyz %d %s, status %+v", code, body, st)
		}
	}
}
