package collateral

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// A PCCS that serves an older QE identity (Intel-signed, still valid)
// after a newer one: the cache refuses it, names it, and keeps serving
// the newer; its marks outlive a restart. Both identities are real: the
// TD quoting enclave's of tcbEvaluationDataNumber 18 (February 2026) and
// 17 (June 2025).
func TestCacheNeverMovesBackwards(t *testing.T) {
	read := func(folder, name string) []byte { return attesttest.ReadReal(t, folder, name) }
	newer, older := read("tdx/dcap-qvl-v5", "qe_identity.json"), read("tdx/dcap-qvl-v4", "qe_identity.json")
	pcs := collateraltest.NewPCS(t, map[string]*collateraltest.Intel{"tdx": {
		TCBInfo:    map[string][]byte{"90c06f000000": read("tdx/dcap-qvl-v5", "tcb_info.json")},
		QEIdentity: newer,
		Chain:      read("tdx/dcap-qvl-v5", "tcb_signing_certs.pem"),
	}}, map[string][]byte{"platform": read("tdx/dcap-qvl-v5", "pck_crl.der"), "root": read("tdx/dcap-qvl-v5", "root_ca_crl.der")})
	clk := &clock{t: time.Date(2026, 2, 19, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	cache := &Cache{Intel: &PCS{URL: pcs.URL}, Dir: dir, Now: clk.Now}
	col, err := cache.Collateral("tdx", "90C06F000000", "platform")
	if err != nil || string(col.QEIdentity) != string(newer) {
		t.Fatalf("first fetch: %v", err)
	}
	pcs.Update("tdx", func(i *collateraltest.Intel) { i.QEIdentity = older })
	clk.Add(2 * time.Hour)
	cache.Refresh(context.Background())
	h := cache.Health()
	if h.Stale != 1 || !strings.Contains(h.LastError, "the TD_QE identity has tcbEvaluationDataNumber 17, older than the 18 already accepted") {
		t.Errorf("health %+v, want the older identity refused and named", h)
	}
	if col, err := cache.Collateral("tdx", "90C06F000000", "platform"); err != nil || string(col.QEIdentity) != string(newer) {
		t.Errorf("after the refusal: %v, want the newer identity served", err)
	}
	// A restart that lost the entries (not the marks) asks again, and is
	// refused the older identity all the same.
	entries, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range entries {
		if filepath.Base(f) != marksFileName {
			_ = os.Remove(f)
		}
	}
	restarted := &Cache{Intel: &PCS{URL: pcs.URL}, Dir: dir, Now: clk.Now}
	if _, err := restarted.Collateral("tdx", "90C06F000000", "platform"); err == nil || !strings.Contains(err.Error(), "older than the 18") {
		t.Errorf("after a restart: %v, want the older identity refused", err)
	}
}

func TestMarks(t *testing.T) {
	m := &Marks{File: filepath.Join(t.TempDir(), "marks.json")}
	v := intelpcs.Version{TEE: "SGX", FMSPC: "00606A000000", QE: "QE", TCBInfo: 17, QEIdentity: 17}
	steps := []struct {
		name   string
		change func(*intelpcs.Version)
		want   string
	}{
		{"the first", func(*intelpcs.Version) {}, ""},
		{"the same again", func(*intelpcs.Version) {}, ""},
		{"a newer TCB info", func(v *intelpcs.Version) { v.TCBInfo = 18 }, ""},
		{"an older TCB info for the FMSPC", func(v *intelpcs.Version) { v.TCBInfo = 17 }, "SGX TCB info for FMSPC 00606A000000 has tcbEvaluationDataNumber 17, older than the 18"},
		{"an older one for another FMSPC is its own", func(v *intelpcs.Version) { v.FMSPC, v.TCBInfo = "00A067110000", 16 }, ""},
		{"an older QE identity", func(v *intelpcs.Version) { v.TCBInfo, v.QEIdentity = 18, 16 }, "the QE identity has tcbEvaluationDataNumber 16, older than the 17"},
		{"TDX's TCB info is not SGX's", func(v *intelpcs.Version) { v.TEE, v.QE, v.TCBInfo, v.QEIdentity = "TDX", "TD_QE", 1, 1 }, ""},
	}
	for _, s := range steps {
		s.change(&v)
		err := m.Admit(v)
		if (s.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), s.want)) {
			t.Errorf("%s: %v, want %q", s.name, err, s.want)
		}
	}
	again := &Marks{File: m.File}
	if err := again.Admit(intelpcs.Version{TEE: "SGX", FMSPC: "00606A000000", QE: "QE", TCBInfo: 17, QEIdentity: 17}); err == nil {
		t.Error("the marks were not kept in their file")
	}
}
