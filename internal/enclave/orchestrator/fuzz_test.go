package orchestrator

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// The plugins' evidence endpoint takes a nonce and report data from any
// process in the enclave: whatever they send, it answers 400 unless both
// are 1 to MaxNonce bytes of hex, and binds exactly those bytes.
func FuzzPluginEvidence(f *testing.F) {
	o := &Orchestrator{NewAttester: NewSimAttester}
	if err := o.Apply(context.Background(), testManifest(manifest.Plugin{Name: "p", Image: "r/p:1", RestartPolicy: "Never"})); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(o.Stop)
	h := o.PluginHandler()
	for _, seed := range [][2]string{{"00", "aa"}, {"", "aa"}, {"zz", "00"}, {"00", string(bytes.Repeat([]byte("ab"), 65))}, {"0", "%"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, nonce, reportData string) {
		q := url.Values{"nonce": {nonce}, "reportData": {reportData}}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathEvidence+"?"+q.Encode(), nil))
		n, nerr := hex.DecodeString(nonce)
		d, derr := hex.DecodeString(reportData)
		valid := nerr == nil && derr == nil && len(n) > 0 && len(n) <= MaxNonce && len(d) > 0 && len(d) <= MaxNonce
		if valid != (rec.Code == http.StatusOK) {
			t.Fatalf("nonce %q, reportData %q: %d %s", nonce, reportData, rec.Code, rec.Body)
		}
		if !valid {
			return
		}
		c, err := sim.Verify(rec.Body.Bytes(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.ReportData, d) || !bytes.Equal(c.Nonce, n) {
			t.Fatalf("the evidence binds %v and %v, want %x and %x", c.ReportData, c.Nonce, d, n)
		}
	})
}
