package collateral

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// Collateral answers a verifier's question for Intel collateral from the
// cache (intelpcs.Source).
func (c *Cache) Collateral(tee, fmspc, ca string) (intelpcs.Collateral, error) {
	if c.Intel == nil {
		return intelpcs.Collateral{}, fmt.Errorf("no Intel PCS or PCCS is configured")
	}
	var col intelpcs.Collateral
	key := intelKey(tee, fmspc, ca)
	return col, c.get(key, c.fetcher(key), &col)
}

func intelKey(tee, fmspc, ca string) string {
	return "intel/" + tee + "/" + strings.ToLower(fmspc) + "/" + ca
}

// fetcher is how the entry key is fetched again, from the key alone (a
// restart keeps the entries, not the questions).
func (c *Cache) fetcher(key string) fetchFunc {
	parts := strings.Split(key, "/")
	switch {
	case parts[0] == "intel" && len(parts) == 4 && c.Intel != nil:
		tee, fmspc, ca := parts[1], parts[2], parts[3]
		return func(ctx context.Context) (any, time.Time, error) {
			col, err := c.Intel.Fetch(ctx, tee, fmspc, ca)
			if err != nil {
				return nil, time.Time{}, err
			}
			// Only collateral Intel signed raises the marks, and none older
			// than they are is kept.
			v, err := verifyVersion(col, c.IntelRoot)
			if err != nil {
				return nil, time.Time{}, err
			}
			if err := c.marks.Admit(v); err != nil {
				return nil, time.Time{}, err
			}
			return col, intelNextUpdate(col), nil
		}
	case parts[0] == "amd" && c.AMD != nil:
		return c.amdFetcher(parts)
	}
	return nil
}

// intelNextUpdate is the earliest next update of the documents and CRLs,
// read without verifying them: it only schedules the next fetch; the
// verifier judges their dates after checking their signatures.
func intelNextUpdate(c intelpcs.Collateral) time.Time {
	var next time.Time
	for _, doc := range []struct {
		raw   []byte
		field string
	}{{c.TCBInfo, "tcbInfo"}, {c.QEIdentity, "enclaveIdentity"}} {
		var env map[string]json.RawMessage
		var body struct {
			NextUpdate time.Time `json:"nextUpdate"`
		}
		if json.Unmarshal(doc.raw, &env) == nil && json.Unmarshal(env[doc.field], &body) == nil {
			next = earliest(next, body.NextUpdate)
		}
	}
	for _, raw := range [][]byte{c.PCKCRL, c.RootCRL} {
		if l, err := x509.ParseRevocationList(raw); err == nil {
			next = earliest(next, l.NextUpdate)
		}
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// verifyVersion is the version of Intel collateral that verifies under
// root (Intel's when nil).
func verifyVersion(c intelpcs.Collateral, root *x509.Certificate) (intelpcs.Version, error) {
	v, err := intelpcs.VersionOf(c, root)
	if err != nil {
		return v, fmt.Errorf("the collateral does not verify: %w", err)
	}
	return v, nil
}
