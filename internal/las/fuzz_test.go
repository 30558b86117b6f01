package las

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	"github.com/cloister-cc/cloister/internal/las/aesm/aesmtest"
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

// Any body a workload sends to POST /v1/sgx/quote gets a quote of exactly
// the report it sent (through the fake AESM), or a 4xx; never a panic or
// a quote of something else.
func FuzzQuoteRequest(f *testing.F) {
	for _, seed := range []string{`{"report":"` + base64.StdEncoding.EncodeToString(make([]byte, aesm.ReportSize)) + `"}`, `{"report":"AA=="}`, `{"report":1}`, `{}`, ``, `[`} {
		f.Add([]byte(seed))
	}
	signer, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		f.Fatal(err)
	}
	sock, _ := aesmtest.Start(f, signer)
	h := (&Server{Probe: &Probe{DevRoot: f.TempDir()}, DCAP: &DCAP{Client: &aesm.Client{Socket: sock}}}).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/sgx/quote", bytes.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			return
		}
		var req laswire.QuoteRequest
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatalf("%q was answered but does not decode: %v", body, err)
		}
		var res laswire.EvidenceResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		claims, err := signer.Verify(res.Evidence, time.Now())
		if err != nil || !bytes.Equal(claims.ReportData, req.Report[320:384]) {
			t.Fatalf("%q: the quote does not carry the report's data: %v", body, err)
		}
	})
}
