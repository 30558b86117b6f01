package conn

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func dialAddr(addr string) func(ctx context.Context, network, _ string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// A TLS server answers, even one that refuses a client without a
// certificate; a port that accepts and closes at once, as a forwarded port
// of a pod not listening yet, does not.
func TestAnswers(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	if err := Answers(context.Background(), dialAddr(srv.Listener.Addr().String())); err != nil {
		t.Errorf("a TLS server: %v", err)
	}
	strict := httptest.NewUnstartedServer(http.NotFoundHandler())
	strict.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12}
	strict.Config.ErrorLog = log.New(io.Discard, "", 0)
	strict.StartTLS()
	defer strict.Close()
	if err := Answers(context.Background(), dialAddr(strict.Listener.Addr().String())); err != nil {
		t.Errorf("a TLS server asking for a client certificate: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if err := Answers(context.Background(), dialAddr(ln.Addr().String())); err == nil {
		t.Error("a port that closes at once answers")
	}
}
