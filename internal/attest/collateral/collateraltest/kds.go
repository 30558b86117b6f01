package collateraltest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// KDS is a fake AMD Key Distribution Service: it answers the paths it was
// given (with their queries: /vcek/v1/Milan/<hwid>?blSPL=..., or
// /vcek/v1/Milan/cert_chain, /vcek/v1/Milan/crl) with their bodies.
type KDS struct {
	*httptest.Server
	recorder

	answers map[string][]byte
}

// NewKDS serves answers (by path and query) until the test ends.
func NewKDS(tb testing.TB, answers map[string][]byte) *KDS {
	tb.Helper()
	k := &KDS{answers: answers}
	k.Server = httptest.NewServer(http.HandlerFunc(k.serve))
	tb.Cleanup(k.Close)
	return k
}

// Set changes the answer to a path.
func (k *KDS) Set(path string, body []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.answers[path] = body
}

func (k *KDS) serve(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.record(w, r) {
		return
	}
	body, ok := k.answers[r.URL.RequestURI()]
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write(body)
}
