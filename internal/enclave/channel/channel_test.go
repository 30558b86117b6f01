package channel

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Over unix sockets, as a simulated enclave's channel: a port and an
// egress each carry a connection; a socket a dead enclave left is
// replaced, a live one and a file that is no socket are not.
func TestUnix(t *testing.T) {
	u := Unix{Dir: t.TempDir()}
	ctx := context.Background()
	for _, c := range []struct {
		listen func() (net.Listener, error)
		dial   func() (net.Conn, error)
	}{
		{func() (net.Listener, error) { return u.ListenPort(8443) }, func() (net.Conn, error) { return u.DialPort(ctx, 8443) }},
		{func() (net.Listener, error) { return u.ListenEgress(0) }, func() (net.Conn, error) { return u.DialEgress(ctx, 0) }},
	} {
		ln, err := c.listen()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			conn, err := ln.Accept()
			if err == nil {
				_, _ = conn.Write([]byte("hi"))
				_ = conn.Close()
			}
		}()
		conn, err := c.dial()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(conn)
		_ = conn.Close()
		if string(b) != "hi" {
			t.Errorf("read %q", b)
		}
		if _, err := c.listen(); err == nil {
			t.Error("a second listener beside a live one")
		}
		// Left behind by a dead enclave: replaced.
		if ul, ok := ln.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		_ = ln.Close()
		again, err := c.listen()
		if err != nil {
			t.Fatalf("a stale socket was not replaced: %v", err)
		}
		_ = again.Close()
	}
	if err := os.WriteFile(filepath.Join(u.Dir, "port-1.sock"), []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := u.ListenPort(1); err == nil {
		t.Error("a file that is no socket was replaced")
	}
}
