package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// fuzzRoutes are the API's requests with a body or a name from outside.
var fuzzRoutes = []struct{ method, path string }{
	{http.MethodPost, "/v1/init"},
	{http.MethodPost, "/v1/recover"},
	{http.MethodPost, "/v1/board"},
	{http.MethodPost, "/v1/policies"},
	{http.MethodPost, "/v1/policies/%s/read"},
	{http.MethodPost, "/v1/attest"},
	{http.MethodPost, "/v1/peer/seed"},
	{http.MethodGet, "/v1/policies/%s"},
	{http.MethodGet, "/v1/policies/%s/history"},
}

// FuzzAPI sends the CAS API requests as any client could, through the
// real handler (limits, strict decoding, validation, core): each is
// answered with a named error or a success, never a panic or an internal
// error, and an error's body is the API's JSON error.
func FuzzAPI(f *testing.F) {
	// Peers are refused here (the daemon's peers.serve is fuzzed in its
	// package): what is fuzzed is the edge's limits and strict decoding.
	h := (&Server{CAS: readyCAS(f), PeerSeed: func(*wire.PeerSeedRequest) (*wire.PeerSeedResponse, error) {
		return nil, fmt.Errorf("%w: %w", core.ErrRejected, attest.Reject(attest.CheckIdentity, "not this CAS"))
	}}).Handler()
	seeds := map[int][]string{
		0: {`{"owners":[],"threshold":1,"token":"x"}`, `{"recoveryOwners":["x"],"threshold":1,"boardThreshold":2,"approvals":[{"key":"x","signature":"AAAA"}]}`},
		1: {`{"share":{"id":1,"value":"AAAA"}}`, `{"share":{"id":1,"value":"AAAA"},"accept":{"generation":3,"key":"x","signature":"AAAA"}}`},
		2: {`{"board":["x"],"signatures":[]}`, `{"version":1,"keys":["x"],"threshold":2,"signatures":[]}`},
		3: {`{"policy":"version: cloister.dev/policy/v1\nname: shop\n","link":{"version":1}}`, `{"sealed":"AAAA","namespace":"default"}`},
		4: {`{"nonce":"AAAA","signatures":[]}`},
		5: {`{"evidence":"AAAA","type":"sim","policy":"shop","service":"web","csr":"x"}`},
		6: {`{"evidence":{"type":"sim","raw":"AAAA"},"key":"-----BEGIN PUBLIC KEY-----"}`},
	}
	for i := range fuzzRoutes {
		for _, s := range append(seeds[i], `{}`, `{"unknown":1}`, `[]`) {
			f.Add(uint8(i), "default/shop", []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, name string, body []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := r.path
		if bytes.Contains([]byte(target), []byte("%s")) {
			target = "/v1/policies/" + url.PathEscape(name) + target[len("/v1/policies/%s"):]
		}
		req, err := http.NewRequest(r.method, "https://cas.test"+target, bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %q: %d %s", r.method, target, body, w.Code, w.Body)
		}
		if w.Code >= 400 {
			var e wire.Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Reason == "" {
				t.Fatalf("%s %s: %d, not the API's JSON error: %s", r.method, target, w.Code, w.Body)
			}
		}
	})
}
