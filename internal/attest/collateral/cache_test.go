package collateral

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
)

// clock is a test's clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The real SGX quote verifies through the cache: fetched once, served
// from memory, then from the copy while the PCS is down for a day (stale,
// said by Health), from the folder after a restart, and refused with a
// named reason once the copy is past its next update.
func TestCacheServesStaleUntilNextUpdate(t *testing.T) {
	pcs := collateraltest.RealPCS(t)
	quote, _ := collateraltest.RealQuotes(t)
	clk := &clock{t: quote.At}
	dir := t.TempDir()
	cache := &Cache{Intel: &PCS{URL: pcs.URL}, Dir: dir, Now: clk.Now}
	verify := func(c *Cache) error {
		_, err := sgx.Verify(quote.Raw, sgx.Options{Source: c, RequireCRLs: true, At: clk.Now()})
		return err
	}
	if err := verify(cache); err != nil {
		t.Fatal(err)
	}
	if err := verify(cache); err != nil || len(pcs.Requests()) != 4 {
		t.Fatalf("second verification: %v, %d requests, want the 4 of the first", err, len(pcs.Requests()))
	}
	// Down for a simulated day: an hourly refresh fails, the copy serves.
	pcs.Fail(repeat(http.StatusServiceUnavailable, 100)...)
	for range 24 {
		clk.Add(time.Hour)
		if err := verify(cache); err != nil {
			t.Fatalf("at %s, the PCS down: %v", clk.Now(), err)
		}
	}
	h := cache.Health()
	if h.Stale != 1 || h.Expired != 0 || !strings.Contains(h.LastError, "503") {
		t.Errorf("health %+v, want one stale entry and the 503", h)
	}
	// 24 hours with a pause that doubles from 10 s to the hour: a try an
	// hour, not one per verification.
	if n := len(pcs.Requests()) - 4; n > 25 {
		t.Errorf("%d requests while down, want the backoff to pace them", n)
	}
	// A restart reads the copy from the folder, the vendor still down.
	restarted := &Cache{Intel: &PCS{URL: pcs.URL}, Dir: dir, Now: clk.Now}
	if err := verify(restarted); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	// The TCB info's next update is 2023-01-16: past it, refused.
	clk.t = time.Date(2023, 1, 17, 0, 0, 0, 0, time.UTC)
	err := verify(restarted)
	if attest.CheckOf(err) != attest.CheckCollateral || !errors.Is(err, ErrExpired) && !strings.Contains(err.Error(), "past its next update") {
		t.Errorf("past the next update: %v", err)
	}
	if restarted.Health().Expired != 1 {
		t.Errorf("health %+v, want the entry expired", restarted.Health())
	}
}

func repeat(code, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = code
	}
	return out
}
