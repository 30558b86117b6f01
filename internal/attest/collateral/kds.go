package collateral

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// AMDKDS is AMD's Key Distribution Service.
const AMDKDS = "https://kdsintf.amd.com"

// KDS fetches from AMD's Key Distribution Service: VCEKs by chip ID and
// reported TCB, the ASK (or ASVK) and ARK of a product line, its CRL. KDS
// allows about one request per 10 s from an address and answers 429
// beyond, so requests wait in one queue, spaced by Interval, and back off
// on 429.
type KDS struct {
	// URL is the service's base: AMDKDS, or a mirror's.
	URL string
	// Interval is the least time between two requests; when zero, 10 s
	// to AMD's KDS and none to a mirror, which has no such limit (a 429
	// still backs off).
	Interval time.Duration
	// Client makes the requests; nil: one with a 30 s timeout.
	Client *http.Client

	mu   sync.Mutex // the queue
	last time.Time
}

var productLine = regexp.MustCompile(`^(Milan|Genoa|Turin)$`)

// VCEK returns the VCEK certificate (DER) of a chip at a reported TCB.
func (k *KDS) VCEK(ctx context.Context, line string, chipID []byte, tcb uint64) ([]byte, error) {
	if !productLine.MatchString(line) {
		return nil, fmt.Errorf("product line %q: want Milan, Genoa or Turin", line)
	}
	if len(chipID) != 64 {
		return nil, fmt.Errorf("chip ID of %d bytes, want 64", len(chipID))
	}
	b := func(i int) uint64 { return (tcb >> (8 * i)) & 0xff }
	hwid, query := chipID, fmt.Sprintf("blSPL=%d&teeSPL=%d&snpSPL=%d&ucodeSPL=%d", b(0), b(1), b(6), b(7))
	if line == "Turin" { // Turin's TCB layout and its 8-byte hardware ID
		hwid, query = chipID[:8], fmt.Sprintf("fmcSPL=%d&blSPL=%d&teeSPL=%d&snpSPL=%d&ucodeSPL=%d", b(0), b(1), b(2), b(3), b(7))
	}
	return k.get(ctx, "/vcek/v1/"+line+"/"+hex.EncodeToString(hwid)+"?"+query, maxDocument)
}

// Chain returns the product line's intermediate (ASK, or ASVK for "vlek")
// and ARK, PEM, as KDS serves them.
func (k *KDS) Chain(ctx context.Context, line, signer string) ([]byte, error) {
	if !productLine.MatchString(line) || (signer != "vcek" && signer != "vlek") {
		return nil, fmt.Errorf("product line %q and signer %q: want Milan, Genoa or Turin and vcek or vlek", line, signer)
	}
	return k.get(ctx, "/"+signer+"/v1/"+line+"/cert_chain", maxDocument)
}

// CRL returns the product line's CRL (DER), signed by its ARK.
func (k *KDS) CRL(ctx context.Context, line, signer string) ([]byte, error) {
	if !productLine.MatchString(line) || (signer != "vcek" && signer != "vlek") {
		return nil, fmt.Errorf("product line %q and signer %q: want Milan, Genoa or Turin and vcek or vlek", line, signer)
	}
	return k.get(ctx, "/"+signer+"/v1/"+line+"/crl", maxCRL)
}

// get waits its turn in the queue and fetches path, backing off on 429
// (the Retry-After said, else twice the interval, doubling) until ctx
// ends.
func (k *KDS) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	interval := k.Interval
	if interval <= 0 && (k.URL == "" || strings.TrimSuffix(k.URL, "/") == AMDKDS) {
		interval = 10 * time.Second
	}
	pause := max(2*interval, time.Second)
	for {
		if err := sleepCtx(ctx, time.Until(k.last.Add(interval))); err != nil {
			return nil, fmt.Errorf("AMD KDS %s: waiting for the rate limit: %w", trimQuery(path), err)
		}
		k.last = time.Now()
		body, err := k.once(ctx, path, limit)
		var status *StatusError
		if !errors.As(err, &status) || status.Code != http.StatusTooManyRequests {
			return body, err
		}
		wait := pause
		if status.RetryAfter > 0 {
			wait = max(status.RetryAfter, interval)
		}
		pause *= 2
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, fmt.Errorf("%w; gave up waiting: %w", status, err)
		}
	}
}

func (k *KDS) once(ctx context.Context, path string, limit int64) ([]byte, error) {
	base := strings.TrimSuffix(k.URL, "/")
	if base == "" {
		base = AMDKDS
	}
	target := base + path
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("KDS URL: %w", err)
	}
	body, _, err := httpGet(ctx, k.Client, u, nil, limit)
	return body, err
}

func trimQuery(p string) string {
	path, _, _ := strings.Cut(p, "?")
	return path
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
