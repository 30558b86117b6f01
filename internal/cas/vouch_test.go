package cas_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// switchProxy terminates TLS with its own certificate and forwards each
// request to the CAS route picks for it.
type switchProxy struct {
	srv   *httptest.Server
	route atomic.Pointer[func(*http.Request) string]
}

func newSwitchProxy(t *testing.T) *switchProxy {
	t.Helper()
	p := &switchProxy{}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the proxy under test; the client verifies CAS by its statement
	t.Cleanup(tr.CloseIdleConnections)
	p.srv = httptest.NewTLSServer(&httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) {
		target, _ := url.Parse((*p.route.Load())(r.In))
		r.SetURL(target)
	}})
	t.Cleanup(p.srv.Close)
	return p
}

func (p *switchProxy) to(fn func(*http.Request) string) { p.route.Store(&fn) }

func (p *switchProxy) ca() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
}

// Through a TLS-terminating proxy, where CAS's TLS key is not the one a
// client sees, a client verifies which CAS answers by its statement over
// a fresh nonce and the evidence binding the key that signed it, then
// verifies a manifest's history and log through the proxy; a proxy that
// puts another CAS there, replays an older statement, or answers other
// requests from another CAS is refused.
func TestVouchedThroughATLSTerminatingProxy(t *testing.T) {
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	urlA, caA, _ := castest.Start(t, dirA, "file:"+filepath.Join(dirA, "seed.sealed"))
	urlB, caB, _ := castest.Start(t, dirB, "file:"+filepath.Join(dirB, "seed.sealed"))
	a, _ := initAt(t, urlA, caA)
	b, _ := initAt(t, urlB, caB)
	owner, _ := policy.NewKey()
	doc := "version: cloister.dev/policy/v1\nname: shop\nowners: {keys: [\"" + pemKey(owner) + "\"]}\nservices:\n- {name: web, attestation: {identities: [{type: sgx, mrenclave: \"" + strings.Repeat("11", 32) + "\"}]}, certificate: {sans: [web]}}\n"
	for _, c := range []*casclient.Client{a, b} {
		if _, err := c.RegisterPolicy(ctx, sign(t, c, doc, owner)); err != nil {
			t.Fatal(err)
		}
	}
	expectA := casclient.Expect{Policy: attest.Policy{AllowSimulation: true}}
	expectA.Verify.SimKeys = []*ecdsa.PublicKey{castest.SimKey(t, dirA)}
	proxy := newSwitchProxy(t)
	proxy.to(func(*http.Request) string { return urlA })

	// The TLS-bound way cannot work here: the key on the wire is the
	// proxy's.
	if _, _, err := casclient.NewAttested(ctx, proxy.srv.URL, expectA, nil); err == nil {
		t.Fatal("CAS's evidence taken for the proxy's TLS key")
	}
	c, vouch, _, err := casclient.NewVouched(ctx, proxy.srv.URL, proxy.ca(), expectA, nil)
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	if !vouch.Claims.Insecure || vouch.Statement.State != "ready" || vouch.Statement.Log == nil || !strings.Contains(vouch.Statement.Checkpoint, "\n2\n") {
		t.Errorf("the statement: insecure=%v %+v", vouch.Claims.Insecure, vouch.Statement)
	}
	h, err := c.History(ctx, "shop")
	if err != nil {
		t.Fatalf("the history through the proxy: %v", err)
	}
	if _, err := c.Logged(ctx, filepath.Join(t.TempDir(), "log-checkpoint"), casclient.LogPolicy{}, h.Records); err != nil {
		t.Errorf("the log through the proxy: %v", err)
	}

	// Another CAS behind the proxy.
	proxy.to(func(*http.Request) string { return urlB })
	if _, _, _, err := casclient.NewVouched(ctx, proxy.srv.URL, proxy.ca(), expectA, nil); err == nil || !strings.Contains(err.Error(), "evidence") {
		t.Errorf("another CAS behind the proxy: %v", err)
	}
	// CAS A's statement, everything else from B: refused by what the
	// statement names.
	proxy.to(func(r *http.Request) string {
		if r.URL.Path == "/v1/evidence" {
			return urlA
		}
		return urlB
	})
	mixed, _, _, err := casclient.NewVouched(ctx, proxy.srv.URL, proxy.ca(), expectA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mixed.History(ctx, "shop"); err == nil || !strings.Contains(err.Error(), "another history key") {
		t.Errorf("B's history under A's statement: %v", err)
	}
	hb, _ := b.History(ctx, "shop")
	if _, err := mixed.Logged(ctx, filepath.Join(t.TempDir(), "log-checkpoint"), casclient.LogPolicy{}, hb.Records); err == nil {
		t.Error("B's log checkpoint under A's log key")
	}
	// A statement recorded once and replayed.
	var mu sync.Mutex
	var recorded []byte
	rec := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if recorded == nil {
			resp, err := proxyOnce(urlA, r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			recorded = resp
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(recorded)
	}))
	t.Cleanup(rec.Close)
	recCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rec.Certificate().Raw})
	if _, _, _, err := casclient.NewVouched(ctx, rec.URL, recCA, expectA, nil); err != nil {
		t.Fatalf("the first, recorded: %v", err)
	}
	if _, _, _, err := casclient.NewVouched(ctx, rec.URL, recCA, expectA, nil); err == nil || !strings.Contains(err.Error(), "another nonce") {
		t.Errorf("a replayed statement: %v", err)
	}
}

// proxyOnce forwards r to the CAS at base and returns the answer's body.
func proxyOnce(base string, r *http.Request) ([]byte, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.Path, r.Body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the recording proxy under test
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	return io.ReadAll(resp.Body)
}
