// Package lasclient asks a node's local attestation service (LAS) for
// evidence over its HTTP API (las/wire), for a workload that attests to
// CAS through it (the initializer, the CLI's cas attest).
package lasclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// Client asks the node's local attestation service for evidence.
type Client struct {
	URL  string // http://HOST:18766
	HTTP *http.Client
}

// Quote is evidence binding reportData (the CAS client's Quoter).
func (l *Client) Quote(ctx context.Context, reportData []byte) (attest.Evidence, error) {
	var out laswire.EvidenceResponse
	if err := l.do(ctx, http.MethodPost, "/v1/evidence", laswire.EvidenceRequest{ReportData: reportData}, &out); err != nil {
		return attest.Evidence{}, err
	}
	return attest.Evidence{Type: out.Type, Raw: out.Evidence}, nil
}

// do sends a JSON request (none for a nil body) and decodes the answer
// into out, bounded.
func (l *Client) do(ctx context.Context, method, path string, in, out any) error {
	hc := l.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.URL+path, body)
	if err != nil {
		return fmt.Errorf("LAS %s: %w", l.URL, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("LAS %s: %w", l.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("LAS %s: %s: %s", l.URL, resp.Status, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("LAS %s: %w", l.URL, err)
	}
	return nil
}

// TargetInfo is the node's quoting enclave's TARGETINFO, which an enclave
// targets its REPORT at.
func (l *Client) TargetInfo(ctx context.Context) ([]byte, error) {
	var out laswire.TargetInfoResponse
	if err := l.do(ctx, http.MethodGet, "/v1/sgx/target-info", nil, &out); err != nil {
		return nil, err
	}
	return out.TargetInfo, nil
}

// QuoteReport has the node's quoting enclave quote an enclave's REPORT.
func (l *Client) QuoteReport(ctx context.Context, report []byte) (attest.Evidence, error) {
	var out laswire.EvidenceResponse
	if err := l.do(ctx, http.MethodPost, "/v1/sgx/quote", laswire.QuoteRequest{Report: report}, &out); err != nil {
		return attest.Evidence{}, err
	}
	return attest.Evidence{Type: out.Type, Raw: out.Evidence}, nil
}
