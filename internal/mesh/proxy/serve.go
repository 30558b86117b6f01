package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the limits a proxy puts on each listener.
const (
	DefaultMaxConnections = 1024
	DefaultIdleTimeout    = 15 * time.Minute
	// DefaultMaxConnectionsPerSource is the mesh's cap per caller's
	// address on its ingress: an eighth of the listener's, so seven other
	// callers at least keep room while one holds all it may.
	DefaultMaxConnectionsPerSource = DefaultMaxConnections / 8
)

// Accept errors other than a closed listener (out of file descriptors,
// a connection reset before it was accepted) are retried after a pause
// that doubles from acceptRetryMin up to acceptRetryMax.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// serve accepts on ln until ctx ends and hands every connection to
// handle, at most MaxConnections at a time and, with perSource, at most
// that many from one source address.
func (p *Proxy) serve(ctx context.Context, ln net.Listener, direction string, perSource int, handle func(net.Conn)) error {
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	limit := p.MaxConnections
	if limit <= 0 {
		limit = DefaultMaxConnections
	}
	slots := make(chan struct{}, limit)
	sources := &sourceCount{max: perSource, open: map[string]int{}, warned: map[string]bool{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	pause, full := time.Duration(0), false
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			pause = min(max(2*pause, acceptRetryMin), acceptRetryMax)
			if pause == acceptRetryMin {
				p.Log.Warn("accepting a connection failed; retrying", "listener", ln.Addr().String(), "error", err.Error())
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		source := sourceOf(conn)
		if first, ok := sources.take(source); !ok {
			if first {
				p.Log.Warn("connection cap of one source reached: its new connections are closed until some end", "listener", ln.Addr().String(), "direction", direction, "source", source, "max", perSource)
			}
			p.count(direction, Limited)
			_ = conn.Close()
			continue
		}
		select {
		case slots <- struct{}{}:
			full = false
		default:
			// At the cap: the open connections go on, this one is turned
			// away at once rather than queued behind them.
			if !full {
				p.Log.Warn("connection cap reached: new connections are closed until some end", "listener", ln.Addr().String(), "direction", direction, "max", limit)
				full = true
			}
			p.count(direction, Limited)
			sources.release(source)
			_ = conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer sources.release(source)
			handle(conn)
		}()
	}
}

// sourceOf is the address a connection comes from, without its port:
// one caller, whatever ports it opens from.
func sourceOf(conn net.Conn) string {
	addr := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// sourceCount counts the open connections of each source, up to max (0:
// no cap).
type sourceCount struct {
	mu     sync.Mutex
	max    int
	open   map[string]int
	warned map[string]bool
}

// take counts one more connection of source, unless it is at the cap;
// first says the cap was just reached (to log once until it clears).
func (s *sourceCount) take(source string) (first, ok bool) {
	if s.max <= 0 {
		return false, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[source] >= s.max {
		first = !s.warned[source]
		s.warned[source] = true
		return first, false
	}
	s.open[source]++
	return false, true
}

func (s *sourceCount) release(source string) {
	if s.max <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[source]--; s.open[source] <= 0 {
		delete(s.open, source)
		delete(s.warned, source)
	}
}

// halfCloser is a connection whose writing side closes alone (TCP, TLS).
type halfCloser interface {
	CloseWrite() error
}

// pipe copies both ways until both directions end, passing each EOF on as
// a half-close, then closes both connections. A connection on which
// neither side sent anything for IdleTimeout ends.
func (p *Proxy) pipe(a, b net.Conn) {
	idle := p.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(2)
	oneWay := func(dst, src net.Conn) {
		defer wg.Done()
		_ = copyIdle(dst, src, &last, idle)
		if hc, ok := dst.(halfCloser); ok {
			_ = hc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go oneWay(a, b)
	go oneWay(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}

// A connection copies through a buffer of smallBuffer; one whose read
// fills it (a bulk transfer) takes one of copyBuffer from a pool until a
// read brings less than an eighth of that. A plain-text read of
// copyBuffer becomes one batch of full TLS records, and a TLS read up to
// that many records (meshTLS) one write of plain text: fewer system calls
// per byte than io.Copy's 32 KiB; an idle connection holds only the
// small buffer.
const (
	smallBuffer = 32 << 10
	copyBuffer  = 256 << 10
)

var buffers = sync.Pool{New: func() any { return new([copyBuffer]byte) }}

// copyIdle copies src to dst until src ends, or until neither direction
// (last is both's latest activity) moved for idle. A read that times out
// while the other direction is busy waits on: a one-way stream is not
// idle. Deadlines are moved on only once a tenth of idle has passed, not
// at every read: setting one costs as much as a small read.
func copyIdle(dst, src net.Conn, last *atomic.Int64, idle time.Duration) error {
	small := make([]byte, smallBuffer)
	buf := small
	var big *[copyBuffer]byte
	defer func() {
		if big != nil {
			buffers.Put(big)
		}
	}()
	var readBy, writeBy time.Time
	for {
		now := time.Now()
		if readBy.Sub(now) < idle-idle/10 {
			readBy = now.Add(idle)
			if err := src.SetReadDeadline(readBy); err != nil {
				return err
			}
		}
		n, err := src.Read(buf)
		if n > 0 {
			now = time.Now()
			last.Store(now.UnixNano())
			if writeBy.Sub(now) < idle-idle/10 {
				writeBy = now.Add(idle)
				if werr := dst.SetWriteDeadline(writeBy); werr != nil {
					return werr
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			switch {
			case n == len(buf) && big == nil:
				big = buffers.Get().(*[copyBuffer]byte)
				buf = big[:]
			case n < copyBuffer/8 && big != nil:
				buffers.Put(big)
				big, buf = nil, small
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
				readBy = time.Time{} // expired: set afresh
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
