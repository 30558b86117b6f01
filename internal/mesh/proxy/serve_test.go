package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// app is a loopback app: each connection echoes, and with ticks it also
// writes a byte every tick, unasked.
func app(t *testing.T, tick time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if tick > 0 {
					go func() {
						for {
							time.Sleep(tick)
							if _, err := c.Write([]byte{'.'}); err != nil {
								return
							}
						}
					}()
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// closed says whether the proxy ended conn: a read sees EOF or a reset
// within wait.
func closed(conn net.Conn, wait time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !errors.As(err, &ne) || !ne.Timeout()
	}
}

// A flood beyond the connection cap is turned away at once, counted and
// logged once, while the open connections go on; when the flood ends and
// connections close, new ones are served again.
func TestConnectionCap(t *testing.T) {
	logs := &testenv.Buffer{}
	var limited atomic.Int64
	p := &Proxy{Log: slog.New(slog.NewTextHandler(logs, nil)), MaxConnections: 4,
		Count: func(_, outcome string) {
			if outcome == Limited {
				limited.Add(1)
			}
		}}
	target := app(t, 0)
	addr := start(t, func(ctx context.Context, ln net.Listener) error { return p.Ingress(ctx, ln, Fixed(target, nil)) })
	var open []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if got, err := roundTrip(c, "hello"); err != nil || got != "hello" {
			t.Fatalf("connection %d: %q, %v", i, got, err)
		}
		open = append(open, c)
	}
	var wg sync.WaitGroup
	var served atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			if got, err := roundTrip(c, "flood"); err == nil && got == "flood" {
				served.Add(1)
			}
		}()
	}
	wg.Wait()
	if served.Load() != 0 || limited.Load() != 50 {
		t.Errorf("over the cap: %d served, %d counted limited, want 0 and 50", served.Load(), limited.Load())
	}
	if n := strings.Count(logs.String(), "connection cap reached"); n != 1 {
		t.Errorf("%d log lines for one flood:\n%s", n, logs)
	}
	for i, c := range open {
		if got, err := roundTrip(c, "still"); err != nil || got != "still" {
			t.Errorf("open connection %d during the flood: %q, %v", i, got, err)
		}
	}
	for _, c := range open {
		_ = c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := roundTrip(c, "again")
		_ = c.Close()
		if err == nil && got == "again" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not served again after the flood: %q, %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A connection neither side sends on ends after the idle timeout; one the
// app streams on, while the client only listens, does not.
func TestIdleTimeout(t *testing.T) {
	p := &Proxy{Log: slog.New(slog.DiscardHandler), IdleTimeout: 300 * time.Millisecond}
	quiet := start(t, func(ctx context.Context, ln net.Listener) error { return p.Ingress(ctx, ln, Fixed(app(t, 0), nil)) })
	streaming := start(t, func(ctx context.Context, ln net.Listener) error {
		return p.Ingress(ctx, ln, Fixed(app(t, 50*time.Millisecond), nil))
	})
	c, err := net.Dial("tcp", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got, err := roundTrip(c, "hi"); err != nil || got != "hi" {
		t.Fatalf("%q, %v", got, err)
	}
	if !closed(c, 3*time.Second) {
		t.Error("an idle connection stayed open")
	}
	s, err := net.Dial("tcp", streaming)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	_ = s.SetReadDeadline(time.Now().Add(time.Second))
	n, err := io.ReadFull(s, make([]byte, 12)) // some 600 ms of the app's stream
	if err != nil {
		t.Errorf("a one-way stream ended after %d bytes: %v", n, err)
	}
}

// failing fails its first Accepts with an error that is not a closed
// listener (as out of file descriptors does).
type failing struct {
	net.Listener
	left atomic.Int64
}

func (f *failing) Accept() (net.Conn, error) {
	if f.left.Add(-1) >= 0 {
		return nil, errors.New("accept: too many open files")
	}
	return f.Listener.Accept()
}

// An accept error that is not the listener's end is retried with a
// pause, logged once, and the proxy goes on serving.
func TestAcceptErrorsRetried(t *testing.T) {
	logs := &testenv.Buffer{}
	p := &Proxy{Log: slog.New(slog.NewTextHandler(logs, nil))}
	target := app(t, 0)
	addr := start(t, func(ctx context.Context, ln net.Listener) error {
		f := &failing{Listener: ln}
		f.left.Store(5)
		return p.Ingress(ctx, f, Fixed(target, nil))
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got, err := roundTrip(c, "hi"); err != nil || got != "hi" {
		t.Fatalf("after accept errors: %q, %v", got, err)
	}
	if n := strings.Count(logs.String(), "accepting a connection failed"); n != 1 {
		t.Errorf("%d log lines for one streak of errors:\n%s", n, logs)
	}
}

// One caller holding more idle connections than a listener has slots
// takes only its own share of them (DefaultMaxConnectionsPerSource): a
// legitimate client from another address is still answered, and the
// flood is counted and logged once.
func TestConnectionCapPerSource(t *testing.T) {
	logs := &testenv.Buffer{}
	var limited atomic.Int64
	p := &Proxy{Log: slog.New(slog.NewTextHandler(logs, nil)), MaxConnectionsPerSource: DefaultMaxConnectionsPerSource,
		Count: func(_, outcome string) {
			if outcome == Limited {
				limited.Add(1)
			}
		}}
	target := app(t, 0)
	addr := start(t, func(ctx context.Context, ln net.Listener) error { return p.Ingress(ctx, ln, Fixed(target, nil)) })
	from := func(ip string) *net.Dialer { return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}} }
	const flood = 1100 // more than the listener's DefaultMaxConnections
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for i := range flood {
		c, err := from("127.0.0.2").Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	want := int64(flood - DefaultMaxConnectionsPerSource)
	for deadline := time.Now().Add(30 * time.Second); limited.Load() < want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if limited.Load() != want {
		t.Errorf("%d of the flood's connections counted limited, want %d", limited.Load(), want)
	}
	c, err := from("127.0.0.3").Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello" {
		t.Errorf("a legitimate client while one source holds %d connections: %q, %v", flood, got, err)
	}
	if n := strings.Count(logs.String(), "connection cap of one source reached"); n != 1 {
		t.Errorf("%d log lines for one source's flood", n)
	}
}
