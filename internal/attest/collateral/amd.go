package collateral

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AMDFetcher fetches AMD collateral (a KDS client).
type AMDFetcher interface {
	VCEK(ctx context.Context, line string, chipID []byte, tcb uint64) ([]byte, error)
	CRL(ctx context.Context, line, signer string) ([]byte, error)
}

// VCEK answers a verifier's question for a chip's VCEK from the cache
// (snp.Source). A VCEK never changes: it is fetched once and kept until
// it expires.
func (c *Cache) VCEK(line string, chipID []byte, tcb uint64) ([]byte, error) {
	if c.AMD == nil {
		return nil, fmt.Errorf("no AMD KDS is configured")
	}
	var der []byte
	key := fmt.Sprintf("amd/vcek/%s/%s/%016x", line, hex.EncodeToString(chipID), tcb)
	return der, c.get(key, c.fetcher(key), &der)
}

// CRL answers a verifier's question for a product line's CRL from the
// cache (snp.Source).
func (c *Cache) CRL(line, signer string) ([]byte, error) {
	if c.AMD == nil {
		return nil, fmt.Errorf("no AMD KDS is configured")
	}
	var der []byte
	key := "amd/crl/" + line + "/" + signer
	return der, c.get(key, c.fetcher(key), &der)
}

// amdFetcher is how an AMD entry is fetched again, from its key.
func (c *Cache) amdFetcher(parts []string) fetchFunc {
	switch {
	case len(parts) == 5 && parts[1] == "vcek":
		line, hexID, tcbHex := parts[2], parts[3], parts[4]
		chipID, err1 := hex.DecodeString(hexID)
		tcb, err2 := strconv.ParseUint(tcbHex, 16, 64)
		if err1 != nil || err2 != nil {
			return nil
		}
		return func(ctx context.Context) (any, time.Time, error) {
			der, err := c.AMD.VCEK(ctx, line, chipID, tcb)
			if err != nil {
				return nil, time.Time{}, err
			}
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("the VCEK from AMD KDS: %w", err)
			}
			return der, cert.NotAfter, nil
		}
	case len(parts) == 4 && parts[1] == "crl":
		line, signer := parts[2], parts[3]
		return func(ctx context.Context) (any, time.Time, error) {
			der, err := c.AMD.CRL(ctx, line, signer)
			if err != nil {
				return nil, time.Time{}, err
			}
			l, err := x509.ParseRevocationList(der)
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("the CRL from AMD KDS: %w", err)
			}
			return der, l.NextUpdate, nil
		}
	}
	return nil
}

// pinned entries (certificates) are current until they expire: MaxAge
// does not send them back to the vendor.
func pinned(key string) bool { return strings.HasPrefix(key, "amd/vcek/") }
