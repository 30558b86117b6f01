package collateraltest

import (
	"net/http"
	"sync"
)

// recorder is what the fakes share: the requests they saw, with their API
// keys, and failures queued to answer the next ones with.
type recorder struct {
	mu       sync.Mutex
	fail     []int
	requests []string
	keys     []string
}

// Fail answers the next len(statuses) requests with those statuses; 429
// says to retry after a second.
func (r *recorder) Fail(statuses ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = append(r.fail, statuses...)
}

// Requests are the paths and queries asked for, in order.
func (r *recorder) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// Keys are the Intel DCAP API keys the requests carried, in order.
func (r *recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// record notes req and, when a failure is queued, answers with it and
// says so; the caller holds r.mu.
func (r *recorder) record(w http.ResponseWriter, req *http.Request) bool {
	r.requests = append(r.requests, req.URL.RequestURI())
	r.keys = append(r.keys, req.Header.Get("Ocp-Apim-Subscription-Key"))
	w.Header().Set("Request-ID", "fake-request")
	if len(r.fail) == 0 {
		return false
	}
	code := r.fail[0]
	r.fail = r.fail[1:]
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, http.StatusText(code), code)
	return true
}

// Recover drops the failures still queued: the service is back.
func (r *recorder) Recover() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = nil
}
