package collateral

import (
	"context"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/snp"
)

// snpKDS is a fake KDS serving a test chip's VCEK and its product line's
// CRL (under go-sev-guest's test ARK), and a report of that chip without
// its certificate table: the verifier must fetch.
func snpKDS(t *testing.T, now time.Time, crlNext time.Time, revoke func(*producetest.SNPSigner) []*big.Int) (*collateraltest.KDS, *producetest.SNPSigner, []byte) {
	t.Helper()
	signer, err := producetest.NewSNPSigner(now)
	if err != nil {
		t.Fatal(err)
	}
	report, err := signer.Report([]byte("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	var revoked []*big.Int
	if revoke != nil {
		revoked = revoke(signer)
	}
	crl, err := signer.CRL(now.Add(-time.Hour), crlNext, revoked...)
	if err != nil {
		t.Fatal(err)
	}
	kds := collateraltest.NewKDS(t, map[string][]byte{
		collateraltest.VCEKPath(t, "Milan", report): signer.VCEK(),
		"/vcek/v1/Milan/crl":                        crl,
	})
	return kds, signer, report
}

// KDS rate limits: the client backs off on 429, then succeeds; the cache
// then answers without asking. Down for a simulated day, verification
// goes on from the cache, which says it is stale; past the CRL's next
// update, refused with a named reason.
func TestKDSRateLimitAndOutage(t *testing.T) {
	start := time.Now()
	clk := &clock{t: start}
	kds, signer, report := snpKDS(t, start, start.Add(36*time.Hour), nil)
	cache := &Cache{AMD: &KDS{URL: kds.URL, Interval: 10 * time.Millisecond}, Dir: t.TempDir(), Now: clk.Now}
	verify := func() error {
		_, err := snp.Verify(report, snp.Options{At: clk.Now(), TestRoots: signer.Roots(), Source: cache})
		return err
	}
	kds.Fail(http.StatusTooManyRequests, http.StatusTooManyRequests)
	began := time.Now()
	if err := verify(); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 2*time.Second {
		t.Errorf("answered after %s: the two 429s said to retry after a second each", waited)
	}
	if got := kds.Requests(); len(got) != 4 || !strings.Contains(got[2], "/vcek/v1/Milan/") || got[3] != "/vcek/v1/Milan/crl" {
		t.Fatalf("requests %q: want two refused, then the VCEK and the CRL", got)
	}
	if err := verify(); err != nil || len(kds.Requests()) != 4 {
		t.Fatalf("again: %v after %d requests; want it from the cache", err, len(kds.Requests()))
	}
	kds.Fail(repeat(http.StatusServiceUnavailable, 1000)...)
	for range 24 {
		clk.Add(time.Hour)
		if err := verify(); err != nil {
			t.Fatalf("at +%s, KDS down: %v", clk.Now().Sub(start), err)
		}
	}
	if h := cache.Health(); h.Stale != 1 || h.Expired != 0 || !h.NextUpdate.Equal(start.Add(36*time.Hour).Truncate(time.Second)) {
		t.Errorf("health %+v: want the CRL stale, next update at +36h", h)
	}
	clk.Add(13 * time.Hour)
	err := verify()
	if attest.CheckOf(err) != attest.CheckCollateral || !strings.Contains(err.Error(), "past its next update") {
		t.Errorf("past the CRL's next update: %v", err)
	}
	if h := cache.Health(); h.Expired != 1 {
		t.Errorf("health %+v: want the CRL expired", h)
	}
}

// A chip whose ASK the product line's CRL lists is refused.
func TestKDSRevokedASK(t *testing.T) {
	now := time.Now()
	kds, signer, report := snpKDS(t, now, now.Add(time.Hour), func(s *producetest.SNPSigner) []*big.Int { return []*big.Int{s.ASK().SerialNumber} })
	cache := &Cache{AMD: &KDS{URL: kds.URL, Interval: time.Millisecond}}
	_, err := snp.Verify(report, snp.Options{At: now, TestRoots: signer.Roots(), Source: cache})
	if attest.CheckOf(err) != attest.CheckRevoked || !strings.Contains(err.Error(), "is revoked by the VCEK CRL of Milan") {
		t.Errorf("a revoked ASK: %v", err)
	}
}

func TestKDSRefusesBadQuestions(t *testing.T) {
	k := &KDS{URL: "http://127.0.0.1:1", Interval: time.Millisecond}
	ctx := context.Background()
	if _, err := k.VCEK(ctx, "Mars", make([]byte, 64), 0); err == nil || !strings.Contains(err.Error(), "product line") {
		t.Errorf("unknown line: %v", err)
	}
	if _, err := k.VCEK(ctx, "Milan", make([]byte, 8), 0); err == nil || !strings.Contains(err.Error(), "chip ID") {
		t.Errorf("short chip ID: %v", err)
	}
	if _, err := k.Chain(ctx, "Milan/../x", "vcek"); err == nil {
		t.Error("a path in the product line was taken")
	}
}

// A real Turin report without its certificate table: its VCEK is asked of
// KDS by Turin's 8-byte hardware id and TCB layout (fmcSPL first), here
// written out from the VCEK's own extension (openssl asn1parse), and verifies the report;
// the CRL, which a fetching source requires, is what is missing then.
func TestKDSTurinVCEK(t *testing.T) {
	report, vcek := attesttest.ReadReal(t, "snp/oak-turin-v5", "report.bin"), attesttest.ReadReal(t, "snp/oak-turin-v5", "vcek.der")
	const path = "/vcek/v1/Turin/3b42092f69c656d3?fmcSPL=0&blSPL=1&teeSPL=0&snpSPL=2&ucodeSPL=71"
	kds := collateraltest.NewKDS(t, map[string][]byte{path: vcek})
	_, err := snp.Verify(report, snp.Options{At: time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC), Source: Direct{AMD: &KDS{URL: kds.URL}}})
	if attest.CheckOf(err) != attest.CheckCollateral || !strings.Contains(err.Error(), "VCEK CRL of Turin") {
		t.Errorf("got %v, want the VCEK taken and its CRL missing", err)
	}
	if got := kds.Requests(); len(got) < 2 || got[0] != path || got[1] != "/vcek/v1/Turin/crl" {
		t.Errorf("requests %q, want the VCEK at %s, then the CRL", got, path)
	}
}

// KDS is out while a chip the cache has never seen (the real Turin one)
// attests: its miss waits in the background queue and is told to retry,
// while the chip the cache holds is served on, never waiting for the
// vendor. Back, KDS answers the queued fetch and the Turin report gets
// past its VCEK (to the CRL, which only AMD could sign).
func TestKDSOutageColdChip(t *testing.T) {
	now := time.Now()
	kds, milan, milanReport := snpKDS(t, now, now.Add(36*time.Hour), nil)
	turinReport, turinVCEK := attesttest.ReadReal(t, "snp/oak-turin-v5", "report.bin"), attesttest.ReadReal(t, "snp/oak-turin-v5", "vcek.der")
	// KDS's spacing (here 300 ms) holds the cold chip's fetch longer than
	// a verification waits for it.
	cache := &Cache{AMD: &KDS{URL: kds.URL, Interval: 300 * time.Millisecond}, MissWait: 50 * time.Millisecond}
	verifyMilan := func() error {
		_, err := snp.Verify(milanReport, snp.Options{At: now, TestRoots: milan.Roots(), Source: cache})
		return err
	}
	verifyTurin := func() error {
		_, err := snp.Verify(turinReport, snp.Options{At: time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC), Source: cache})
		return err
	}
	// Warm: the first verifications are told to retry while the queue
	// fetches the Milan chip's VCEK and CRL.
	for deadline := time.Now().Add(30 * time.Second); verifyMilan() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(verifyMilan())
		}
	}
	kds.Fail(repeat(http.StatusServiceUnavailable, 1000)...)
	cold := verifyTurin()
	if attest.CheckOf(cold) != attest.CheckCollateral || !strings.Contains(cold.Error(), "being fetched in the background") {
		t.Fatalf("the cold chip during the outage: %v", cold)
	}
	for range 200 {
		if err := verifyMilan(); err != nil {
			t.Fatalf("the cached chip during the outage: %v", err)
		}
	}
	t.Logf("cold chip: %v; the cached chip: 200 of 200 served during the outage", cold)
	kds.Recover()
	kds.Set("/vcek/v1/Turin/3b42092f69c656d3?fmcSPL=0&blSPL=1&teeSPL=0&snpSPL=2&ucodeSPL=71", turinVCEK)
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if last = verifyTurin(); last != nil && strings.Contains(last.Error(), "VCEK CRL of Turin") {
			return
		}
	}
	t.Errorf("the cold chip after the outage: %v, want its VCEK fetched (and its CRL missing)", last)
}
