package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Handler serves POST /add-checkpoint (C2SP tlog-witness).
func (w *Witness) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+AddCheckpointPath, func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxRequest))
		if err != nil {
			http.Error(rw, fmt.Sprintf("request: %v", err), http.StatusRequestEntityTooLarge)
			return
		}
		req, err := ParseRequest(body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		sigs, err := w.Add(req)
		var ref *Refusal
		switch {
		case errors.As(err, &ref) && ref.Status == http.StatusConflict:
			rw.Header().Set("Content-Type", SizeContentType)
			rw.WriteHeader(http.StatusConflict)
			_, _ = fmt.Fprintf(rw, "%d\n", ref.Size)
		case errors.As(err, &ref):
			http.Error(rw, ref.Reason, ref.Status)
		case err != nil:
			w.log.Error("cosigning", "err", err)
			http.Error(rw, "the witness could not keep the checkpoint", http.StatusInternalServerError)
		default:
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = rw.Write(sigs)
		}
	})
	return mux
}

// Endpoint is a witness a log asks to cosign: the root URL it
// serves add-checkpoint under, and its cosignature verifier.
type Endpoint struct {
	URL      string
	Verifier note.Verifier
}

// maxAnswer bounds a witness's answer: a few signature lines.
const maxAnswer = 4 << 10

// Ask sends req to the witness at e and returns its cosignature line,
// checked with e's key over the checkpoint. A 409 is a *Refusal whose
// Size is the size the witness holds.
func Ask(ctx context.Context, hc *http.Client, e Endpoint, req Request) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(e.URL, "/")+AddCheckpointPath, bytes.NewReader(req.Marshal()))
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(r)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", e.Verifier.Name(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", e.Verifier.Name(), err)
	}
	if len(body) > maxAnswer {
		return nil, fmt.Errorf("witness %s: an answer over %d bytes", e.Verifier.Name(), maxAnswer)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("witness %s: a conflict without the size it holds", e.Verifier.Name())
		}
		return nil, &Refusal{Status: resp.StatusCode, Size: n, Reason: fmt.Sprintf("witness %s holds size %d", e.Verifier.Name(), n)}
	default:
		return nil, &Refusal{Status: resp.StatusCode, Reason: fmt.Sprintf("witness %s refused (%s): %s", e.Verifier.Name(), resp.Status, strings.TrimSpace(string(body)))}
	}
	// The answer's lines must be signatures of e over the checkpoint.
	i := bytes.Index(req.Checkpoint, []byte("\n\n"))
	if i < 0 {
		return nil, errors.New("a checkpoint without signatures")
	}
	signed := append(append(bytes.Clone(req.Checkpoint[:i+1]), '\n'), body...)
	if _, err := note.Open(signed, note.VerifierList(e.Verifier)); err != nil {
		return nil, fmt.Errorf("witness %s answered no valid cosignature: %w", e.Verifier.Name(), err)
	}
	return body, nil
}

// Cosign asks the witness at e to cosign cp, starting from the size it
// is believed to hold, and once more from the size it says it holds;
// proof gives the consistency proof from an older size to cp's.
func Cosign(ctx context.Context, hc *http.Client, e Endpoint, cp []byte, held, size int64, proof func(old int64) (tlog.TreeProof, error)) ([]byte, int64, error) {
	for try := 0; ; try++ {
		var p tlog.TreeProof
		if held > 0 && held < size {
			var err error
			if p, err = proof(held); err != nil {
				return nil, held, err
			}
		}
		sig, err := Ask(ctx, hc, e, Request{OldSize: held, Proof: p, Checkpoint: cp})
		var ref *Refusal
		if errors.As(err, &ref) && ref.Status == http.StatusConflict && ref.Size != held && ref.Size <= size && try == 0 {
			held = ref.Size
			continue
		}
		if err != nil {
			return nil, held, err
		}
		return sig, size, nil
	}
}
