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
)

// Accept errors other than a closed listener (out of file descriptors,
// a connection reset before it was accepted) are retried after a pause
// that doubles from acceptRetryMin up to acceptRetryMax.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// serve accepts on ln until ctx ends and hands every connection to
// handle, at most MaxConnections at a time.
func (p *Proxy) serve(ctx context.Context, ln net.Listener, direction string, handle func(net.Conn)) error {
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	limit := p.MaxConnections
	if limit <= 0 {
		limit = DefaultMaxConnections
	}
	slots := make(chan struct{}, limit)
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
			_ = conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			handle(conn)
		}()
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

// copyIdle copies src to dst until src ends, or until neither direction
// (last is both's latest activity) moved for idle. A read that times out
// while the other direction is busy waits on: a one-way stream is not
// idle.
func copyIdle(dst, src net.Conn, last *atomic.Int64, idle time.Duration) error {
	buf := make([]byte, 32<<10)
	for {
		if err := src.SetReadDeadline(time.Now().Add(idle)); err != nil {
			return err
		}
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if werr := dst.SetWriteDeadline(time.Now().Add(idle)); werr != nil {
				return werr
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
