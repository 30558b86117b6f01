package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
)

// echo is the app: it writes back what it reads.
func echo(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ln.Close() // a network peer may have closed first
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				if _, err := io.Copy(c, c); err != nil {
					t.Error(err)
				}
				_ = c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// start runs a proxy on a fresh loopback listener and returns its address.
func start(t testing.TB, run func(ctx context.Context, ln net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	return ln.Addr().String()
}

func roundTrip(conn net.Conn, msg string) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := conn.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(conn, buf)
	return string(buf), err
}

// web → its egress → the backend's ingress (mTLS) → the backend app, with
// real certificates of one mesh CA: the app's bytes arrive, the ingress
// sees the caller's workload identity; without a mesh certificate, or in
// plain text, the mTLS port refuses.
func TestEgressToIngress(t *testing.T) {
	ca := meshtest.NewCA(t)
	backendDir, webDir := t.TempDir(), t.TempDir()
	ca.Write(t, backendDir, "backend.default")
	ca.Write(t, webDir, "web.default")
	backendCerts, webCerts := &Certs{Dir: backendDir}, &Certs{Dir: webDir}
	logs := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	app := echo(t)
	ingress := start(t, func(ctx context.Context, ln net.Listener) error {
		return (&Proxy{Log: log}).Ingress(ctx, ln, Fixed(app, backendCerts.ServerConfig(true)))
	})
	egress := start(t, func(ctx context.Context, ln net.Listener) error {
		return (&Proxy{Log: log}).Egress(ctx, ln, ingress, webCerts)
	})

	conn, err := net.Dial("tcp", egress)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(conn, "hello backend"); err != nil || got != "hello backend" {
		t.Fatalf("through the mesh: %q %v", got, err)
	}
	_ = conn.Close() // a network peer may have closed first
	if !strings.Contains(logs.String(), "peer=spiffe://"+meshtest.TrustDomain+"/policy/"+meshtest.Policy+"/service/web.default") {
		t.Errorf("the ingress did not see the caller's identity:\n%s", logs)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	noCert, err := tls.Dial("tcp", ingress, &tls.Config{RootCAs: pool, ServerName: "backend.default", MinVersion: tls.VersionTLS13})
	if err == nil {
		_, err = roundTrip(noCert, "x")
		_ = noCert.Close() // a network peer may have closed first
	}
	if err == nil {
		t.Error("a client without a mesh certificate got through")
	}
	plain, err := net.Dial("tcp", ingress)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(plain, "GET / HTTP/1.0\r\n\r\n"); err == nil && strings.HasPrefix(got, "GET") {
		t.Error("plain text reached the app through the mTLS port")
	}
	_ = plain.Close() // a network peer may have closed first
}

// A port with disableTLS false: TLS, no client certificate asked.
func TestServerTLSWithoutClientCertificate(t *testing.T) {
	ca := meshtest.NewCA(t)
	dir := t.TempDir()
	ca.Write(t, dir, "main.default")
	app := echo(t)
	ingress := start(t, func(ctx context.Context, ln net.Listener) error {
		return (&Proxy{Log: slog.New(slog.DiscardHandler)}).Ingress(ctx, ln, Fixed(app, (&Certs{Dir: dir}).ServerConfig(false)))
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	conn, err := tls.Dial("tcp", ingress, &tls.Config{RootCAs: pool, ServerName: "main.default", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if got, err := roundTrip(conn, "hi"); err != nil || got != "hi" {
		t.Errorf("%q %v", got, err)
	}
}

// The initializer replaces the files: the next connection gets the new
// certificate, the open one keeps working.
func TestRotation(t *testing.T) {
	ca := meshtest.NewCA(t)
	dir := t.TempDir()
	first := ca.Write(t, dir, "main.default")
	app := echo(t)
	ingress := start(t, func(ctx context.Context, ln net.Listener) error {
		return (&Proxy{Log: slog.New(slog.DiscardHandler)}).Ingress(ctx, ln, Fixed(app, (&Certs{Dir: dir}).ServerConfig(false)))
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	dial := func() (*tls.Conn, int64) {
		conn, err := tls.Dial("tcp", ingress, &tls.Config{RootCAs: pool, ServerName: "main.default", MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatal(err)
		}
		return conn, conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	old, serial := dial()
	defer func() { _ = old.Close() }()
	if serial != first {
		t.Fatalf("serial %d, want %d", serial, first)
	}
	time.Sleep(10 * time.Millisecond) // a new modification time on coarse clocks
	second := ca.Write(t, dir, "main.default")
	fresh, serial := dial()
	defer func() { _ = fresh.Close() }()
	if serial != second {
		t.Errorf("after the rotation: serial %d, want %d", serial, second)
	}
	for _, c := range []net.Conn{old, fresh} {
		if got, err := roundTrip(c, "still"); err != nil || got != "still" {
			t.Errorf("%q %v", got, err)
		}
	}
}
