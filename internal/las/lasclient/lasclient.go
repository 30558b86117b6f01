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
	hc := l.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	body, _ := json.Marshal(laswire.EvidenceRequest{ReportData: reportData})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.URL+"/v1/evidence", bytes.NewReader(body))
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("LAS %s: %w", l.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("LAS %s: %w", l.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return attest.Evidence{}, fmt.Errorf("LAS %s: %s: %s", l.URL, resp.Status, bytes.TrimSpace(data))
	}
	var out laswire.EvidenceResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return attest.Evidence{}, fmt.Errorf("LAS %s: %w", l.URL, err)
	}
	return attest.Evidence{Type: out.Type, Raw: out.Evidence}, nil
}
