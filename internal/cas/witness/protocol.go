// Package witness owns Cloister's transparency-log witness: a server of
// the C2SP tlog-witness protocol that cosigns a log's checkpoint only
// when it extends the last one it cosigned for that log (kept on disk),
// so a log that rolls back or shows two histories gets no cosignature;
// and the client a log uses to ask it.
package witness

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

const (
	// AddCheckpointPath is where a witness takes a checkpoint to cosign.
	AddCheckpointPath = "/add-checkpoint"
	// SizeContentType is a 409 answer's: the size the witness holds.
	SizeContentType = "text/x.tlog.size"
	// MaxRequest bounds an add-checkpoint request: the old size, a
	// consistency proof (at most 63 hashes of 64 levels) and a checkpoint.
	MaxRequest = 16 << 10
	maxProof   = 63
)

// Request is an add-checkpoint request: the size of the checkpoint the
// log believes the witness holds, the proof that Checkpoint extends it,
// and the signed checkpoint note.
type Request struct {
	OldSize    int64
	Proof      tlog.TreeProof
	Checkpoint []byte
}

// Marshal is the request body.
func (r Request) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", r.OldSize)
	for _, h := range r.Proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(r.Checkpoint)
	return b.Bytes()
}

// ParseRequest reads an add-checkpoint body strictly: "old N", one
// base64 hash per line, an empty line, the checkpoint.
func ParseRequest(body []byte) (Request, error) {
	if len(body) > MaxRequest {
		return Request{}, fmt.Errorf("a request of %d bytes: at most %d", len(body), MaxRequest)
	}
	head, cp, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return Request{}, errors.New("no empty line between the proof and the checkpoint")
	}
	lines := strings.Split(string(head), "\n")
	n, ok := strings.CutPrefix(lines[0], "old ")
	if !ok {
		return Request{}, fmt.Errorf("first line %q: want \"old SIZE\"", lines[0])
	}
	old, err := strconv.ParseInt(n, 10, 64)
	if err != nil || old < 0 || strconv.FormatInt(old, 10) != n {
		return Request{}, fmt.Errorf("old size %q: want a decimal number without sign or leading zeros", n)
	}
	if len(lines)-1 > maxProof {
		return Request{}, fmt.Errorf("a consistency proof of %d hashes: at most %d", len(lines)-1, maxProof)
	}
	r := Request{OldSize: old, Checkpoint: cp}
	for i, l := range lines[1:] {
		raw, err := base64.StdEncoding.Strict().DecodeString(l)
		if err != nil || len(raw) != tlog.HashSize {
			return Request{}, fmt.Errorf("proof line %d: want a base64 SHA-256 hash", i+1)
		}
		var h tlog.Hash
		copy(h[:], raw)
		r.Proof = append(r.Proof, h)
	}
	if len(cp) == 0 {
		return Request{}, errors.New("no checkpoint after the proof")
	}
	return r, nil
}
