package api

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// readyCAS is an initialised CAS on a bolt store of its own.
func readyCAS(tb testing.TB) *core.CAS {
	tb.Helper()
	db, err := store.OpenBolt(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Fatal(err)
		}
	})
	cas, err := core.Open(core.Config{Store: db, Sealer: seal.NoSealer{}, InitToken: core.FixedToken("t0ken"), AllowSimulation: true})
	if err != nil {
		tb.Fatal(err)
	}
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := cas.Init([]*ecdsa.PublicKey{&owner.PublicKey}, 1, "t0ken", &boardKey.PublicKey); err != nil {
		tb.Fatal(err)
	}
	return cas
}

// server is a ready CAS behind the API on a real TLS listener.
func server(t *testing.T, perClient int, maxInFlight ...int) (*httptest.Server, *core.CAS) {
	t.Helper()
	cas := readyCAS(t)
	srv := &Server{CAS: cas, PerClient: perClient}
	if len(maxInFlight) > 0 {
		srv.MaxInFlight = maxInFlight[0]
	}
	ts := httptest.NewTLSServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts, cas
}

func post(t *testing.T, ts *httptest.Server, path, contentType string, body io.Reader) (int, wire.Error) {
	t.Helper()
	resp, err := ts.Client().Post(ts.URL+path, contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var e wire.Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, e
}

// boardKey approves the tests' new policy names.
var boardKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

func TestBadInput(t *testing.T) {
	ts, cas := server(t, 0)
	key, _ := policy.NewKey()
	valid := `version: cloister.dev/policy/v1
name: shop
owners: {keys: ["` + strings.ReplaceAll(string(policy.MarshalPublicKey(&key.PublicKey)), "\n", `\n`) + `"]}
allowSimulation: true
services: [{name: web, attestation: {identities: []}, certificate: {sans: [web]}}]
`
	unsigned, _ := json.Marshal(wire.PolicyRequest{Policy: valid, Link: policy.Link{Version: 1}})
	for _, tc := range []struct {
		name, path, contentType, body string
		code                          int
		reason, msg                   string
	}{
		{"malformed JSON", "/v1/policies", "application/json", `{"policy": `, 400, "malformed", "request body"},
		{"unknown field", "/v1/policies", "application/json", `{"policy": "x", "signature": []}`, 400, "malformed", `unknown field "signature"`},
		{"two values", "/v1/attest", "application/json", `{} {}`, 400, "malformed", "more than one JSON value"},
		{"wrong content type", "/v1/policies", "text/yaml", `policy: x`, 415, "content-type", "send application/json"},
		{"oversized", "/v1/attest", "application/json", `{"csr": "` + strings.Repeat("A", 300<<10) + `"}`, 413, "too-large", "over"},
		{"invalid policy", "/v1/policies", "application/json", `{"policy": "version: v0"}`, 400, "invalid", "version"},
		{"no version", "/v1/policies", "application/json", `{"policy": ` + jsonString(valid) + `}`, 400, "invalid", "version: 0: sign the policy as version 1"},
		{"unsigned policy", "/v1/policies", "application/json", string(unsigned), 403, "unauthorized", "signed by 0 of its owners, 1 needed"},
		{"attest to an unknown policy", "/v1/attest", "application/json", `{"policy": "shop", "service": "web", "csr": "aGVsbG8="}`, 404, "not-found", `policy "shop"`},
		{"bad init", "/v1/init", "application/json", `{"recoveryOwners": ["x"], "threshold": 1}`, 400, "invalid", "recoveryOwners[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, e := post(t, ts, tc.path, tc.contentType, strings.NewReader(tc.body))
			if code != tc.code || e.Reason != tc.reason || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("got %d %+v, want %d %s (%q)", code, e, tc.code, tc.reason, tc.msg)
			}
		})
	}
	// Nothing was stored.
	if _, err := cas.Policy("shop"); err == nil {
		t.Error("a refused request stored the policy")
	}
	// With the policy there, a bad CSR is named as such.
	s := &policy.Signed{Policy: valid, Link: policy.Link{Version: 1}}
	for _, k := range []*ecdsa.PrivateKey{key, boardKey} { // its owner; the board, for its name
		if err := policy.Sign(s, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cas.Register(s); err != nil {
		t.Fatal(err)
	}
	code, e := post(t, ts, "/v1/attest", "application/json", strings.NewReader(`{"policy": "shop", "service": "web", "csr": "aGVsbG8="}`))
	if code != 400 || e.Reason != "invalid" || !strings.Contains(e.Error, "csr: ") {
		t.Errorf("invalid CSR: %d %+v", code, e)
	}
	resp, err := ts.Client().Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`cloister_cas_attestations_total{reason="csr",result="rejected"} 1`,
		`cloister_cas_attestations_total{reason="unknown-policy",result="rejected"} 1`,
		`cloister_cas_policy_changes_total{result="refused"} 1`,
		`cloister_cas_policy_changes_total{result="accepted"} 1`,
		"cloister_cas_policies 1",
		`cloister_cas_state{state="ready"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	code, e = post(t, ts, "/v1/init", "application/json", strings.NewReader(`{"recoveryOwners": [], "threshold": 1}`))
	if code != 409 || e.Reason != "initialized" {
		t.Errorf("init again: %d %+v", code, e)
	}
}

// A client with PerClient requests in flight gets 429 for the next one.
func TestPerClientLimit(t *testing.T) {
	ts, _ := server(t, 1)
	pr, pw := io.Pipe()
	started := make(chan struct{})
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/attest", pr)
		req.Header.Set("Content-Type", "application/json")
		close(started)
		resp, err := ts.Client().Do(req)
		if err != nil {
			done <- 0
			return
		}
		if err := resp.Body.Close(); err != nil {
			t.Error(err)
		}
		done <- resp.StatusCode
	}()
	<-started
	// The handler now waits for the rest.
	if _, err := pw.Write([]byte(`{"policy": `)); err != nil {
		t.Fatal(err)
	}
	var code int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if code, _ = post(t, ts, "/v1/attest", "application/json", bytes.NewReader([]byte(`{}`))); code == http.StatusTooManyRequests {
			break
		}
	}
	if code != http.StatusTooManyRequests {
		t.Errorf("second request while one is in flight: %d, want 429", code)
	}
	if _, err := pw.Write([]byte(`"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if c := <-done; c != http.StatusNotFound {
		t.Errorf("the slow request ended %d, want 404 (no policy x)", c)
	}
	if code, _ := post(t, ts, "/v1/attest", "application/json", bytes.NewReader([]byte(`{}`))); code == http.StatusTooManyRequests {
		t.Error("still limited after the first request ended")
	}
}

// With MaxInFlight requests in flight CAS refuses the next, whoever
// sends it, with 429; its probes and metrics are served all the same.
func TestGlobalLimit(t *testing.T) {
	ts, _ := server(t, 100, 1)
	pr, pw := io.Pipe()
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/attest", pr)
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.Client().Do(req)
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(`{"policy": `)); err != nil {
		t.Fatal(err)
	}
	var code int
	var e wire.Error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if code, e = post(t, ts, "/v1/attest", "application/json", bytes.NewReader([]byte(`{}`))); code == http.StatusTooManyRequests {
			break
		}
	}
	if code != http.StatusTooManyRequests || !strings.Contains(e.Error, "CAS has 1 requests in flight, its limit") {
		t.Errorf("a request beyond the global limit: %d %+v", code, e)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			t.Errorf("%s refused at the limit", path)
		}
	}
	_, _ = pw.Write([]byte(`"x"}`))
	_ = pw.Close()
	<-done
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A CAS told to stop reports not ready, so new clients choose another
// replica, and goes on answering those that chose it already.
func TestDrainingIsNotReadyButServes(t *testing.T) {
	cas := readyCAS(t)
	srv := &Server{CAS: cas}
	ts := httptest.NewTLSServer(srv.Handler())
	t.Cleanup(ts.Close)
	get := func(path string) int {
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/readyz"); got != http.StatusOK {
		t.Fatalf("a ready CAS: readyz %d", got)
	}
	srv.Drain()
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("a draining CAS: readyz %d", got)
	}
	if got := get("/v1/ca"); got != http.StatusOK {
		t.Errorf("a draining CAS does not serve: /v1/ca %d", got)
	}
}
