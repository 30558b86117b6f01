package las

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// Any body a workload on the node sends to POST /v1/evidence gets evidence
// binding exactly the report data it asked for, or a 4xx; never a panic, a
// 5xx, or evidence for something else.
func FuzzEvidenceRequest(f *testing.F) {
	for _, seed := range []string{`{"reportData":"00ff"}`, `{"reportData":""}`, `{"reportData":"zz"}`, `{"other":1}`, `{}`, ``, `[`,
		`{"reportData":"00"}{"reportData":"01"}`, `{}}`, `{"reportData":"00"}]`} {
		f.Add([]byte(seed))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	h := (&Server{Probe: &Probe{DevRoot: f.TempDir()}, Quoter: &sim.Quoter{Key: key}}).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/evidence", bytes.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			return
		}
		var req laswire.EvidenceRequest
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatalf("%q was answered but does not decode: %v", body, err)
		}
		var res laswire.EvidenceResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		claims, err := sim.Verify(res.Evidence, time.Now(), &key.PublicKey)
		if err != nil || !bytes.HasPrefix(claims.ReportData, req.ReportData) {
			t.Fatalf("%q: evidence %v does not bind the report data: %v", body, claims, err)
		}
	})
}
