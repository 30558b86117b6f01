// Package collateraltest runs local fakes of the vendors' collateral
// services at their real paths and headers, serving the real, vendor-signed
// collateral a test gives them: Intel PCS (API v4, as a PCCS serves it
// too) and AMD KDS.
package collateraltest

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Intel is the collateral of one kind of TEE ("sgx" or "tdx").
type Intel struct {
	TCBInfo map[string][]byte // by FMSPC, lower case hex
	// QEIdentity is the QE identity.
	QEIdentity []byte
	// Chain is the TCB signing chain (PEM) sent in the issuer chain
	// headers.
	Chain []byte
}

// PCS is a fake Intel PCS.
type PCS struct {
	*httptest.Server
	// Key, when set, is the API key every request must carry (401
	// otherwise).
	Key string

	recorder
	tee map[string]*Intel
	crl map[string][]byte // by CA: processor, platform; root: the root CA
}

// NewPCS serves tee's collateral and the CRLs (by CA: "processor",
// "platform", and "root" for the root CA's) until the test ends.
func NewPCS(tb testing.TB, tee map[string]*Intel, crls map[string][]byte) *PCS {
	tb.Helper()
	p := &PCS{tee: tee, crl: crls}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(p.Close)
	return p
}

func (p *PCS) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.record(w, r) {
		return
	}
	if p.Key != "" && r.Header.Get("Ocp-Apim-Subscription-Key") != p.Key {
		http.Error(w, "Access denied due to missing subscription key", http.StatusUnauthorized)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 4 || parts[1] != "certification" || parts[2] != "v4" {
		http.NotFound(w, r)
		return
	}
	tee, what := parts[0], strings.Join(parts[3:], "/")
	q := r.URL.Query()
	switch {
	case what == "pckcrl" && tee == "sgx":
		p.send(w, r, p.crl[q.Get("ca")], "SGX-PCK-CRL-Issuer-Chain", nil)
	case what == "rootcacrl" && tee == "sgx":
		p.send(w, r, p.crl["root"], "", nil)
	case what == "tcb" && p.tee[tee] != nil:
		p.send(w, r, p.tee[tee].TCBInfo[strings.ToLower(q.Get("fmspc"))], "TCB-Info-Issuer-Chain", p.tee[tee].Chain)
	case what == "qe/identity" && p.tee[tee] != nil:
		p.send(w, r, p.tee[tee].QEIdentity, "SGX-Enclave-Identity-Issuer-Chain", p.tee[tee].Chain)
	default:
		http.NotFound(w, r)
	}
}

func (p *PCS) send(w http.ResponseWriter, r *http.Request, body []byte, chainHeader string, chain []byte) {
	if body == nil {
		http.NotFound(w, r)
		return
	}
	if chainHeader != "" && chain != nil {
		w.Header().Set(chainHeader, url.PathEscape(string(chain)))
	}
	_, _ = w.Write(body)
}

// Intel is the collateral served for tee.
func (p *PCS) Intel(tee string) *Intel { return p.tee[tee] }

// CRL is the CRL served for ca ("processor", "platform", "root").
func (p *PCS) CRL(ca string) []byte { return p.crl[ca] }

// Update changes what is served for tee.
func (p *PCS) Update(tee string, change func(*Intel)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(p.tee[tee])
}
