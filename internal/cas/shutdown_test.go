package cas

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A client whose HTTP/2 connection finishes its TLS handshake after
// shutdown began must not hold the shutdown until its limit.
func TestShutdownSendsLateConnectionsAway(t *testing.T) {
	inHandshake, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		close(inHandshake)
		<-release
		return nil, nil
	}}
	// Each Shutdown runs the hooks again.
	swept, once := make(chan struct{}), sync.Once{}
	srv.Config.RegisterOnShutdown(func() { once.Do(func() { close(swept) }) })
	srv.StartTLS()
	defer srv.Close()

	// A client that dialed for a request it then gave up on: an HTTP/2
	// connection that opens no stream.
	got := make(chan error, 1)
	go func() {
		roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
		// example.com is a name in httptest's certificate.
		c, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "example.com", NextProtos: []string{"h2"}})
		if err != nil {
			got <- err
			return
		}
		defer func() { _ = c.Close() }()
		if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Errorf("the client spoke %q, want h2", p)
		}
		// The client preface and an empty SETTINGS frame.
		_, err = c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0))
		if err == nil {
			_, err = io.Copy(io.Discard, c) // until the server closes it
		}
		got <- err
	}()
	<-inHandshake
	done := make(chan error, 1)
	const limit = 5 * time.Second
	go func() { done <- shutdown(srv.Config, limit) }()
	<-swept
	// The first Shutdown's own hooks (HTTP/2's GOAWAY sweep among them)
	// run as goroutines beside ours: let them finish before the handshake.
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("shutdown with a connection that came late: %v, want it closed within %v", err, limit)
	}
	if err := <-got; err != nil {
		t.Fatalf("the connection begun before shutdown: %v", err)
	}
}
