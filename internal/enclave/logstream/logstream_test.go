package logstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// follow reads what Follow writes after seq until it has n records.
func follow(t *testing.T, b *Buffer, after uint64, n int) []Record {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = pw.CloseWithError(b.Follow(ctx, after, pw, nil)) }()
	r := NewReader(pr)
	var out []Record
	for len(out) < n {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	cancel()
	_ = pr.Close()
	return out
}

func TestBufferKeepsLinesInOrderAndResumes(t *testing.T) {
	var b Buffer
	_, _ = b.Write([]byte("one\ntw"))
	_, _ = b.Write([]byte("o\nthree\n"))
	recs := follow(t, &b, 0, 3)
	for i, want := range []string{"one", "two", "three"} {
		if string(recs[i].Line) != want || recs[i].Seq != uint64(i+1) {
			t.Errorf("record %d: %+v, want %d %s", i, recs[i], i+1, want)
		}
	}
	// Resuming after 2 gives 3 and then what comes later.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = b.Write([]byte("four\n"))
	}()
	recs = follow(t, &b, 2, 2)
	if string(recs[0].Line) != "three" || string(recs[1].Line) != "four" || recs[1].Seq != 4 {
		t.Errorf("resumed: %+v", recs)
	}
}

// A flood keeps the buffer within its bound; a follower that fell behind
// is told how many lines it missed; a long line is cut and says so.
func TestFloodIsBoundedAndCounted(t *testing.T) {
	b := Buffer{MaxBytes: 1000}
	for i := range 10000 {
		_, _ = b.Write([]byte(strings.Repeat("x", 90) + string(rune('0'+i%10)) + "\n"))
	}
	if b.size > 1000 || len(b.lines) > 11 {
		t.Fatalf("buffer holds %d bytes in %d lines", b.size, len(b.lines))
	}
	recs := follow(t, &b, 0, 2)
	if recs[0].Dropped == 0 || recs[0].Dropped+uint64(len(b.lines)) != 10000 || recs[1].Seq != recs[0].Seq+1 {
		t.Errorf("after a flood: %+v then %+v (%d kept)", recs[0], recs[1], len(b.lines))
	}
	_, _ = b.Write([]byte(strings.Repeat("y", 3*MaxLine) + "\n"))
	last := b.lines[len(b.lines)-1].line
	if len(last) != MaxLine+len(cutMarker) || !bytes.HasSuffix(last, []byte(cutMarker)) {
		t.Errorf("a long line kept as %d bytes", len(last))
	}
}

func TestReaderRefusesWhatIsNoStream(t *testing.T) {
	for _, in := range []string{"x line\n", "12\n", "3 -dropped many\n", "1 " + strings.Repeat("z", MaxLine+100) + "\n"} {
		if _, err := NewReader(strings.NewReader(in)).Next(); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%.20q: %v", in, err)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("1 {\"msg\":\"a\"}\n2 -dropped 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for {
			rec, err := r.Next()
			if err != nil {
				return
			}
			if len(rec.Line) > MaxLine+64 || bytes.IndexByte(rec.Line, '\n') >= 0 {
				t.Fatalf("record of %d bytes, or with a newline", len(rec.Line))
			}
		}
	})
}
