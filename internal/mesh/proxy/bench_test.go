package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
)

// meshPath is an app reached directly, and through web's egress and the
// backend's ingress (mTLS between them, TLS 1.3); directTLS is the same
// app terminating mTLS itself, as an app using the certificates without
// the mesh would.
func meshPath(b *testing.B) (direct, mesh string, directTLS func() (net.Conn, error)) {
	ca := meshtest.NewCA(b)
	backendDir, webDir := b.TempDir(), b.TempDir()
	ca.Write(b, backendDir, "backend.default")
	ca.Write(b, webDir, "web.default")
	log := slog.New(slog.DiscardHandler)
	app := echo(b)
	ingress := start(b, func(ctx context.Context, ln net.Listener) error {
		return (&Proxy{Log: log}).Ingress(ctx, ln, Fixed(app, (&Certs{Dir: backendDir}).ServerConfig(true)))
	})
	egress := start(b, func(ctx context.Context, ln net.Listener) error {
		return (&Proxy{Log: log}).Egress(ctx, ln, ingress, &Certs{Dir: webDir})
	})
	tlsApp := start(b, func(ctx context.Context, ln net.Listener) error {
		tln := tls.NewListener(ln, (&Certs{Dir: backendDir}).ServerConfig(true))
		go func() {
			<-ctx.Done()
			_ = tln.Close() // a network peer may have closed first
		}()
		for {
			c, err := tln.Accept()
			if err != nil {
				return nil
			}
			go func() {
				if _, err := io.Copy(c, c); err != nil {
					b.Error(err)
				}
				_ = c.Close()
			}()
		}
	})
	directTLS = func() (net.Conn, error) {
		cfg, err := (&Certs{Dir: webDir}).ClientConfig("backend.default")
		if err != nil {
			return nil, err
		}
		return tls.Dial("tcp", tlsApp, cfg)
	}
	return app, egress, directTLS
}

// eachPath runs bench on an open connection to the app: directly in
// plain text, directly over mTLS, and through the mesh.
func eachPath(b *testing.B, bench func(b *testing.B, conn net.Conn)) {
	direct, mesh, directTLS := meshPath(b)
	plain := func(addr string) func() (net.Conn, error) {
		return func() (net.Conn, error) { return net.Dial("tcp", addr) }
	}
	for _, path := range []struct {
		name string
		dial func() (net.Conn, error)
	}{{"direct", plain(direct)}, {"direct-tls", directTLS}, {"mesh", plain(mesh)}} {
		b.Run(path.name, func(b *testing.B) {
			conn, err := path.dial()
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			bench(b, conn)
		})
	}
}

// BenchmarkRequest is one 64-byte request and its answer on an open
// connection, directly and through the mesh: p50 and p99 per request.
func BenchmarkRequest(b *testing.B) {
	eachPath(b, func(b *testing.B, conn net.Conn) {
		msg, buf := make([]byte, 64), make([]byte, 64)
		took := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if _, err := conn.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
	})
}

// BenchmarkTransfer1MiB sends 1 MiB and reads it back, directly and
// through the mesh.
func BenchmarkTransfer1MiB(b *testing.B) {
	eachPath(b, func(b *testing.B, conn net.Conn) {
		data, back := make([]byte, 1<<20), make([]byte, 1<<20)
		b.SetBytes(1 << 20)
		b.ResetTimer()
		for range b.N {
			errc := make(chan error, 1)
			go func() { _, err := conn.Write(data); errc <- err }()
			if _, err := io.ReadFull(conn, back); err != nil {
				b.Fatal(err)
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		}
	})
}
