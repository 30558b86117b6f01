// Package collateral fetches what verifiers need from the vendors (Intel
// PCS or a PCCS: TCB info, QE identity, PCK and root CA CRLs; AMD KDS:
// VCEKs, ASK and ARK, CRLs) and caches it. Nothing here is trusted: the
// verifiers check every chain and signature against the pinned vendor
// roots, so a wrong answer (a compromised PCCS, a tampered cache) can deny
// an attestation, never admit one.
package collateral

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
)

// IntelPCS is Intel's Provisioning Certification Service.
const IntelPCS = "https://api.trustedservices.intel.com"

// intelRootCRL is where Intel publishes the SGX Root CA's CRL (the CRL
// distribution point of the certificates it issues).
const intelRootCRL = "https://certificates.trustedservices.intel.com/IntelSGXRootCA.der"

// APIKeyHeader carries the Intel DCAP API key.
const APIKeyHeader = "Ocp-Apim-Subscription-Key" //nolint:gosec // a header name, not a credential

// Response limits: TCB info and QE identity are a few KiB, issuer chains
// two certificates, Intel's PCK CRLs up to a few MiB.
const (
	maxDocument = 1 << 20
	maxCRL      = 4 << 20
	maxChain    = 64 << 10
)

// PCS fetches Intel collateral from Intel PCS (API v4) or a PCCS.
type PCS struct {
	// URL is the service's base: IntelPCS, or a PCCS's (e.g.
	// https://pccs.example:8081).
	URL string
	// Key is the Intel DCAP API key, sent on every request; empty for a
	// PCCS that needs none.
	Key string
	// RootCRL is where the root CA's CRL is: empty for Intel's own when
	// URL is Intel PCS, else the PCCS's rootcacrl.
	RootCRL string
	// Client makes the requests; nil: one with a 30 s timeout.
	Client *http.Client
}

var (
	fmspcPattern = regexp.MustCompile(`^[0-9a-fA-F]{12}$`)
	tees         = map[string]bool{"sgx": true, "tdx": true}
	pckCAs       = map[string]bool{"processor": true, "platform": true}
)

// Fetch returns the collateral for a platform: TCB info and QE identity
// for its TEE with their signing chain, the PCK CA's and root CA's CRLs.
func (p *PCS) Fetch(ctx context.Context, tee, fmspc, ca string) (intelpcs.Collateral, error) {
	var c intelpcs.Collateral
	switch {
	case !tees[tee]:
		return c, fmt.Errorf("TEE %q: want sgx or tdx", tee)
	case !fmspcPattern.MatchString(fmspc):
		return c, fmt.Errorf("FMSPC %q: want 12 hex digits", fmspc)
	case !pckCAs[ca]:
		return c, fmt.Errorf("PCK CA %q: want processor or platform", ca)
	}
	base := strings.TrimSuffix(p.URL, "/")
	var tcbChain, qeChain []byte
	var err error
	if c.TCBInfo, tcbChain, err = p.get(ctx, base+"/"+tee+"/certification/v4/tcb?fmspc="+strings.ToLower(fmspc), maxDocument,
		"TCB-Info-Issuer-Chain", "SGX-TCB-Info-Issuer-Chain"); err != nil {
		return c, err
	}
	if c.QEIdentity, qeChain, err = p.get(ctx, base+"/"+tee+"/certification/v4/qe/identity", maxDocument,
		"SGX-Enclave-Identity-Issuer-Chain", "TDX-Enclave-Identity-Issuer-Chain"); err != nil {
		return c, err
	}
	// Intel signs both with its one TCB signing certificate; the verifier
	// checks both signatures with the TCB info's chain.
	if string(normalize(tcbChain)) != string(normalize(qeChain)) {
		return c, errors.New("the TCB info and the QE identity come with different issuer chains")
	}
	c.SigningChain = tcbChain
	if c.PCKCRL, _, err = p.get(ctx, base+"/sgx/certification/v4/pckcrl?ca="+ca+"&encoding=der", maxCRL); err != nil {
		return c, err
	}
	rootCRL := p.RootCRL
	if rootCRL == "" {
		rootCRL = base + "/sgx/certification/v4/rootcacrl"
		if base == IntelPCS {
			rootCRL = intelRootCRL
		}
	}
	if c.RootCRL, _, err = p.get(ctx, rootCRL, maxCRL); err != nil {
		return c, err
	}
	return c, nil
}

// get fetches one document (at most limit bytes) and, when chainHeaders
// are named, the issuer chain in the first of them present (URL-encoded
// PEM).
func (p *PCS) get(ctx context.Context, target string, limit int64, chainHeaders ...string) ([]byte, []byte, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, nil, fmt.Errorf("collateral URL: %w", err)
	}
	var header http.Header
	if p.Key != "" && u.Host == hostOf(p.URL) { // the key goes to the service it is for, never to a CRL elsewhere
		if u.Scheme != "https" && !loopback(u.Hostname()) {
			return nil, nil, fmt.Errorf("%s: the DCAP API key goes over HTTPS only (or to this machine): give the service's https:// URL", u.Host)
		}
		header = http.Header{APIKeyHeader: {p.Key}}
	}
	body, respHeader, err := httpGet(ctx, p.Client, u, header, limit)
	if err != nil {
		return nil, nil, redact(err, p.Key)
	}
	what := u.Host + u.Path
	if len(chainHeaders) == 0 {
		return body, nil, nil
	}
	for _, h := range chainHeaders {
		v := respHeader.Get(h)
		if v == "" {
			continue
		}
		if len(v) > maxChain {
			return nil, nil, fmt.Errorf("%s: the %s header is over %d bytes", what, h, maxChain)
		}
		chain, err := url.PathUnescape(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: the %s header: %w", what, h, err)
		}
		return body, []byte(chain), nil
	}
	return nil, nil, fmt.Errorf("%s: no issuer chain (%s header)", what, chainHeaders[0])
}

// httpGet fetches u (at most limit bytes) with header; errors name what
// they fetched by host and path, never the query or a header.
func httpGet(ctx context.Context, client *http.Client, u *url.URL, header http.Header, limit int64) ([]byte, http.Header, error) {
	what := u.Host + u.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	maps.Copy(req.Header, header)
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, &StatusError{What: what, Code: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After")), RequestID: resp.Header.Get("Request-ID")}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if int64(len(body)) > limit {
		return nil, nil, fmt.Errorf("%s: the answer is over %d bytes", what, limit)
	}
	return body, resp.Header, nil
}

// StatusError is a vendor's answer other than 200.
type StatusError struct {
	What       string
	Code       int
	RetryAfter time.Duration // 0: not said
	RequestID  string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s: %d %s", e.What, e.Code, http.StatusText(e.Code))
	switch e.Code {
	case http.StatusUnauthorized:
		msg += ": the Intel DCAP API key is missing or wrong"
	case http.StatusNotFound:
		msg += ": the service has none for this platform"
	case http.StatusTooManyRequests:
		msg += ": rate limited"
	}
	if e.RequestID != "" {
		msg += " (request ID " + e.RequestID + ")"
	}
	return msg
}

func retryAfter(v string) time.Duration {
	var s int
	if _, err := fmt.Sscanf(v, "%d", &s); err == nil && s > 0 && s < 3600 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// loopback says whether host is this machine's: a local PCCS or a test's.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

func normalize(pem []byte) []byte { return []byte(strings.Join(strings.Fields(string(pem)), "")) }

// redact removes the key from an error a transport may have built from
// the request.
func redact(err error, key string) error {
	if key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), key, "[DCAP API key]"))
}

var keyPattern = regexp.MustCompile(`^[0-9a-fA-F]{32}$`)

// ReadAPIKeyFile reads an Intel DCAP API key from a file (at most 1 KiB)
// with ParseAPIKey.
func ReadAPIKeyFile(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, 1<<10+1))
	if err != nil {
		return "", err
	}
	if len(raw) > 1<<10 {
		return "", fmt.Errorf("%s is over 1 KiB: not a DCAP API key", file)
	}
	return ParseAPIKey(raw)
}

// keyError is ParseAPIKey's one error: it says the length, never the key.
const keyError = "the DCAP API key is not 32 hex digits (%d characters given): copy it from the Intel PCS portal's subscription page"

// ParseAPIKey reads an Intel DCAP API key (32 hex digits, surrounding
// white space ignored). A key of zeros is none, as on Azure, which serves
// collateral without one. Errors never show the key.
func ParseAPIKey(raw []byte) (string, error) {
	key := strings.TrimSpace(string(raw))
	if !keyPattern.MatchString(key) {
		return "", fmt.Errorf(keyError, len(key))
	}
	if strings.Trim(key, "0") == "" {
		return "", nil
	}
	return key, nil
}
