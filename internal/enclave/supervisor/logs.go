package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/cloister-cc/cloister/internal/enclave/logstream"
	"github.com/cloister-cc/cloister/internal/enclave/orchestrator"
)

// followLogs copies the enclave's log (the orchestrator's records, the
// plugins' lines among them) into s.EnclaveLog, one JSON record per line,
// from the enclave's first line on and, after a broken stream, from where
// it stopped, until ctx ends or the enclave stops. It holds one line at a
// time: the enclave is not trusted with the pod's memory.
func (s *Supervisor) followLogs(ctx context.Context, enc Enclave) {
	if s.EnclaveLog == nil {
		return
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return enc.Dial(ctx) },
	}}
	var after uint64
	warned := false
	for {
		err := s.readLogs(ctx, client, &after)
		select {
		case <-ctx.Done():
			return
		case <-enc.Done():
			return
		default:
		}
		if !warned {
			s.Log.Warn("following the enclave's log; trying again", "error", err.Error())
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-enc.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// readLogs follows one stream of the enclave's log.
func (s *Supervisor) readLogs(ctx context.Context, client *http.Client, after *uint64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://enclave%s?after=%d", orchestrator.PathLogs, *after), nil)
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("the enclave's log: %s", res.Status)
	}
	r := logstream.NewReader(res.Body)
	for {
		rec, err := r.Next()
		if err != nil {
			return err
		}
		if rec.Seq <= *after && *after != 0 {
			return fmt.Errorf("the enclave's log went back from line %d to %d", *after, rec.Seq)
		}
		*after = rec.Seq
		switch {
		case rec.Dropped > 0:
			s.Log.Warn("the enclave's log lost lines that came faster than they were read", "dropped", rec.Dropped)
		case !json.Valid(rec.Line):
			s.Log.Warn("the enclave logged a line that is no JSON record", "line", string(rec.Line))
		default:
			s.enclaveLog(rec.Line)
		}
	}
}

func (s *Supervisor) enclaveLog(line []byte) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	_, _ = s.EnclaveLog.Write(append(line, '\n'))
}
