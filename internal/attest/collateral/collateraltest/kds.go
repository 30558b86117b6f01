package collateraltest

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-sev-guest/abi"
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

// VCEKPath is where AMD KDS serves the VCEK of the chip that signed a
// Milan or Genoa report (its chip ID and reported TCB).
func VCEKPath(tb testing.TB, line string, report []byte) string {
	tb.Helper()
	r, err := abi.ReportToProto(report[:abi.ReportSize])
	if err != nil {
		tb.Fatal(err)
	}
	tcb := r.GetReportedTcb()
	b := func(i int) uint64 { return (tcb >> (8 * i)) & 0xff }
	return fmt.Sprintf("/vcek/v1/%s/%s?blSPL=%d&teeSPL=%d&snpSPL=%d&ucodeSPL=%d", line, hex.EncodeToString(r.GetChipId()), b(0), b(1), b(6), b(7))
}
