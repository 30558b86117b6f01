// Package logstream carries an enclave's log out of it without debug
// mode: the orchestrator's records (its own and, tagged by plugin, every
// line its plugins print) kept in a bounded buffer inside the enclave,
// numbered, and followed by the pod's supervisor over the orchestrator's
// API (vsock on Nitro, a unix socket in simulation), which writes them to
// the pod's log. A plugin that floods loses its oldest lines, counted,
// never the memory of the enclave or the pod.
package logstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// Bounds: a line, and what the buffer keeps.
const (
	// MaxLine is the longest line carried; a longer one is cut, and says
	// so.
	MaxLine = 16 << 10
	// DefaultMaxBytes is how much the buffer keeps.
	DefaultMaxBytes = 4 << 20
)

// cutMarker ends a line cut to MaxLine.
const cutMarker = " …[cut]"

type entry struct {
	seq  uint64
	line []byte
}

// Buffer keeps the newest lines written to it, whole lines up to MaxBytes
// in all, numbered from 1. It is an io.Writer: a log handler writes into
// it.
type Buffer struct {
	// MaxBytes bounds what it keeps; DefaultMaxBytes when 0.
	MaxBytes int

	mu      sync.Mutex
	lines   []entry
	size    int
	next    uint64
	partial []byte
	changed chan struct{}
}

func (b *Buffer) maxBytes() int {
	if b.MaxBytes > 0 {
		return b.MaxBytes
	}
	return DefaultMaxBytes
}

// Write takes lines; an unfinished one waits for its end (cut at MaxLine).
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b.partial = appendCut(b.partial, p)
			break
		}
		line := appendCut(b.partial, p[:i])
		b.partial = nil
		b.add(line)
		p = p[i+1:]
	}
	return n, nil
}

// appendCut appends p to line, never past MaxLine (plus the marker).
func appendCut(line, p []byte) []byte {
	room := MaxLine - len(line)
	if room <= 0 {
		return line
	}
	if len(p) > room {
		return append(append(line, p[:room]...), cutMarker...)
	}
	return append(line, p...)
}

func (b *Buffer) add(line []byte) {
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	b.next++
	b.lines = append(b.lines, entry{b.next, bytes.Clone(line)})
	b.size += len(line)
	for b.size > b.maxBytes() && len(b.lines) > 1 {
		b.size -= len(b.lines[0].line)
		b.lines[0] = entry{}
		b.lines = b.lines[1:]
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// since returns the lines after seq and whether lines were dropped
// before them (how many), and a channel closed at the next write.
func (b *Buffer) since(seq uint64) ([]entry, uint64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	var dropped uint64
	if len(b.lines) > 0 && b.lines[0].seq > seq+1 {
		dropped = b.lines[0].seq - seq - 1
	}
	var out []entry
	for _, e := range b.lines {
		if e.seq > seq {
			out = append(out, e)
		}
	}
	return out, dropped, b.changed
}

// Follow writes the lines after seq as "SEQ LINE\n", then each new one
// as it comes, until ctx ends or w fails; flush, if not nil, runs after
// each batch. Lines dropped before the follower read them are told as one
// line of their own with the next number's prefix "SEQ -dropped N".
func (b *Buffer) Follow(ctx context.Context, after uint64, w io.Writer, flush func()) error {
	seq := after
	for {
		lines, dropped, changed := b.since(seq)
		if dropped > 0 {
			if _, err := fmt.Fprintf(w, "%d -dropped %d\n", seq+dropped, dropped); err != nil {
				return err
			}
			seq += dropped
		}
		for _, e := range lines {
			if _, err := fmt.Fprintf(w, "%d %s\n", e.seq, e.line); err != nil {
				return err
			}
			seq = e.seq
		}
		if flush != nil && (len(lines) > 0 || dropped > 0) {
			flush()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Record is one line read from a stream.
type Record struct {
	Seq uint64
	// Line is the log line; empty when Dropped says lines were lost.
	Line    []byte
	Dropped uint64
}

// ErrLine is a stream line that is not "SEQ LINE".
var ErrLine = errors.New("logstream: not a log stream line")

// Reader reads a stream Follow writes, never holding more than one line
// of MaxLine (and its number) in memory: the other side is not trusted.
type Reader struct {
	r *bufio.Reader
}

// NewReader reads from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, MaxLine+64)} }

// Next returns the next record; a line longer than allowed is an error.
func (r *Reader) Next() (Record, error) {
	line, err := r.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return Record{}, fmt.Errorf("%w: longer than %d bytes", ErrLine, MaxLine+64)
	}
	if err != nil {
		return Record{}, err
	}
	line = line[:len(line)-1]
	num, rest, ok := bytes.Cut(line, []byte(" "))
	seq, perr := strconv.ParseUint(string(num), 10, 64)
	if !ok || perr != nil {
		return Record{}, ErrLine
	}
	if d, ok := bytes.CutPrefix(rest, []byte("-dropped ")); ok {
		n, err := strconv.ParseUint(string(d), 10, 64)
		if err != nil {
			return Record{}, ErrLine
		}
		return Record{Seq: seq, Dropped: n}, nil
	}
	return Record{Seq: seq, Line: bytes.Clone(rest)}, nil
}
