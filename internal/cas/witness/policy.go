package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	fwitness "github.com/transparency-dev/formats/witness"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// MaxPolicy bounds a witness policy file.
const MaxPolicy = 64 << 10

// Policy is which witnesses cosign a log's checkpoints and how many of
// them a client requires: the witness policy format of Sigsum and
// Tessera ("witness NAME VKEY URL", "group NAME N|any|all CHILD...",
// "quorum NAME|none"), with cosignature/v1 keys.
type Policy struct {
	group     fwitness.Group
	endpoints []Endpoint
	text      []byte
}

// ParsePolicy reads a witness policy.
func ParsePolicy(data []byte) (*Policy, error) {
	if len(data) > MaxPolicy {
		return nil, fmt.Errorf("a witness policy of %d bytes: at most %d", len(data), MaxPolicy)
	}
	g, err := fwitness.ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("witness policy: %w", err)
	}
	p := &Policy{group: g, text: bytes.Clone(data)}
	for url, v := range g.Endpoints() {
		p.endpoints = append(p.endpoints, Endpoint{URL: strings.TrimSuffix(url, AddCheckpointPath), Verifier: v})
	}
	sort.Slice(p.endpoints, func(i, j int) bool { return p.endpoints[i].URL < p.endpoints[j].URL })
	return p, nil
}

// Text is the policy as it was read.
func (p *Policy) Text() []byte { return p.text }

// Endpoints are the policy's witnesses.
func (p *Policy) Endpoints() []Endpoint { return p.endpoints }

// Satisfied says whether checkpoint (a signed note) carries the
// cosignatures the policy requires; the log's own signature is the
// caller's to check.
func (p *Policy) Satisfied(checkpoint []byte) bool { return p.group.Satisfied(checkpoint) }

// Quorum asks a policy's witnesses to cosign, remembering the size each
// holds (a witness's 409 corrects it).
type Quorum struct {
	policy *Policy
	hc     *http.Client

	mu   sync.Mutex
	held map[string]int64
}

// Cosigner is a Quorum asking p's witnesses over hc.
func (p *Policy) Cosigner(hc *http.Client) *Quorum {
	return &Quorum{policy: p, hc: hc, held: map[string]int64{}}
}

// Cosign asks every witness at once and returns the cosignature lines it
// got, with an error when they do not satisfy the policy.
func (q *Quorum) Cosign(ctx context.Context, checkpoint []byte, size int64, proof func(old int64) (tlog.TreeProof, error)) ([]byte, error) {
	eps := q.policy.endpoints
	sigs, errs := make([][]byte, len(eps)), make([]error, len(eps))
	var wg sync.WaitGroup
	for i, e := range eps {
		q.mu.Lock()
		held := q.held[e.URL]
		q.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sig, now, err := Cosign(ctx, q.hc, e, checkpoint, held, size, proof)
			sigs[i], errs[i] = sig, err
			if err == nil {
				q.mu.Lock()
				q.held[e.URL] = now
				q.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	all := bytes.Join(sigs, nil)
	if !q.policy.Satisfied(append(bytes.Clone(checkpoint), all...)) {
		return all, fmt.Errorf("the witnesses' cosignatures do not satisfy the witness policy: %w", errors.Join(errs...))
	}
	return all, errors.Join(errs...)
}

// SatisfiedSince is Satisfied counting only cosignatures made at since
// or later: a log rolled back to an older state gets no new ones, its
// witnesses holding a larger checkpoint.
func (p *Policy) SatisfiedSince(checkpoint []byte, since time.Time) bool {
	if p.group.N <= 0 {
		return true
	}
	vs := make([]note.Verifier, len(p.endpoints))
	for i, e := range p.endpoints {
		vs[i] = e.Verifier
	}
	n, err := note.Open(checkpoint, note.VerifierList(vs...))
	if err != nil {
		return false
	}
	var b strings.Builder
	b.WriteString(n.Text)
	b.WriteString("\n")
	for _, s := range n.Sigs {
		if t, err := fnote.CoSigV1Timestamp(s); err == nil && !t.Before(since) {
			fmt.Fprintf(&b, "— %s %s\n", s.Name, s.Base64)
		}
	}
	return p.group.Satisfied([]byte(b.String()))
}

// ReadPolicy reads the witness policy in file.
func ReadPolicy(file string) (*Policy, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicy+1))
	if err != nil {
		return nil, err
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}
