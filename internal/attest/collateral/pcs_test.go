package collateral

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

const testKey = "0123456789abcdef0123456789abcdef"

// Real quotes verify with the collateral fetched from a PCS that wants
// the key, which is sent on every request.
func TestFetchRealCollateral(t *testing.T) {
	pcs := collateraltest.RealPCS(t)
	pcs.Key = testKey
	src := Direct{Intel: &PCS{URL: pcs.URL, Key: testKey}}
	sgxQuote, tdxQuote := collateraltest.RealQuotes(t)
	c, err := sgx.Verify(sgxQuote.Raw, sgx.Options{Source: src, RequireCRLs: true, At: sgxQuote.At})
	if err != nil || c.TCBStatus != attest.TCBSWHardeningNeeded {
		t.Fatalf("SGX: %+v %v", c, err)
	}
	// go-tdx-guest's sample TCB info has no level for its sample quote:
	// the quote gets past its chain, CRLs and collateral to the TCB level.
	if _, err := tdx.Verify(tdxQuote.Raw, tdx.Options{Source: src, RequireCRLs: true, At: tdxQuote.At}); attest.CheckOf(err) != attest.CheckTCB {
		t.Fatalf("TDX: %v, want the TCB level refused", err)
	}
	want := []string{
		"/sgx/certification/v4/tcb?fmspc=00606a000000", "/sgx/certification/v4/qe/identity",
		"/sgx/certification/v4/pckcrl?ca=platform&encoding=der", "/sgx/certification/v4/rootcacrl",
		"/tdx/certification/v4/tcb?fmspc=50806f000000", "/tdx/certification/v4/qe/identity",
		"/sgx/certification/v4/pckcrl?ca=platform&encoding=der", "/sgx/certification/v4/rootcacrl",
	}
	if strings.Join(pcs.Requests(), " ") != strings.Join(want, " ") {
		t.Errorf("requests %q, want %q", pcs.Requests(), want)
	}
	for i, k := range pcs.Keys() {
		if k != testKey {
			t.Errorf("request %d carried key %q", i, k)
		}
	}
}

func TestFetchErrors(t *testing.T) {
	pcs := collateraltest.RealPCS(t)
	pcs.Key = testKey
	ctx := context.Background()
	wrongKey := strings.Repeat("f", 32)
	_, err := (&PCS{URL: pcs.URL, Key: wrongKey}).Fetch(ctx, "sgx", "00606A000000", "platform")
	var status *StatusError
	if !errors.As(err, &status) || status.Code != http.StatusUnauthorized || !strings.Contains(err.Error(), "key is missing or wrong") {
		t.Errorf("a wrong key: %v", err)
	}
	if strings.Contains(err.Error(), wrongKey) {
		t.Errorf("the error shows the key: %v", err)
	}
	pcs.Fail(http.StatusTooManyRequests)
	_, err = (&PCS{URL: pcs.URL, Key: testKey}).Fetch(ctx, "sgx", "00606A000000", "platform")
	if !errors.As(err, &status) || status.Code != http.StatusTooManyRequests || status.RetryAfter != time.Second {
		t.Errorf("rate limited: %v", err)
	}
	// Never in the clear to another machine.
	if _, err := (&PCS{URL: "http://pccs.invalid:8081", Key: testKey}).Fetch(ctx, "sgx", "00606A000000", "platform"); err == nil ||
		!strings.Contains(err.Error(), "HTTPS only") || strings.Contains(err.Error(), testKey) {
		t.Errorf("the key over plain HTTP: %v", err)
	}
	for _, tc := range []struct{ tee, fmspc, ca, want string }{
		{"sev", "00606A000000", "platform", "TEE"},
		{"sgx", "00606A00000", "platform", "FMSPC"},
		{"sgx", "00606A000000/..", "platform", "FMSPC"},
		{"sgx", "00606A000000", "root", "PCK CA"},
		{"sgx", "00906ED50000", "platform", "404"}, // an FMSPC it has nothing for
	} {
		if _, err := (&PCS{URL: pcs.URL, Key: testKey}).Fetch(ctx, tc.tee, tc.fmspc, tc.ca); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s %s: %v, want %q", tc.tee, tc.fmspc, tc.ca, err, tc.want)
		}
	}
}

// The key goes to the service it is for only: a root CRL elsewhere is
// fetched without it.
func TestKeyStaysWithItsService(t *testing.T) {
	pcs, other := collateraltest.RealPCS(t), collateraltest.RealPCS(t)
	if _, err := (&PCS{URL: pcs.URL, Key: testKey, RootCRL: other.URL + "/sgx/certification/v4/rootcacrl"}).Fetch(context.Background(), "sgx", "00606a000000", "platform"); err != nil {
		t.Fatal(err)
	}
	if keys := other.Keys(); len(keys) != 1 || keys[0] != "" {
		t.Errorf("the other host saw keys %q", keys)
	}
}
