package channel

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/mdlayher/vsock"
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

// Two enclaves on one node have egress ports of their own on the parent,
// and each listener passes on only its peer's connections.
func TestVsockPortsAndPeers(t *testing.T) {
	a0, err := EgressPort(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]string{}
	for _, cid := range []uint32{16, 17, 4096} {
		for i := range uint32(MaxEgress) {
			p, err := EgressPort(cid, i)
			if err != nil {
				t.Fatal(err)
			}
			if who, ok := seen[p]; ok || p < EgressBase || p == API {
				t.Fatalf("port %d of CID %d egress %d is also %s's", p, cid, i, who)
			}
			seen[p] = fmt.Sprintf("CID %d egress %d", cid, i)
		}
	}
	if _, err := EgressPort(16, MaxEgress); err == nil {
		t.Error("an egress past MaxEgress got a port")
	}
	if _, err := EgressPort(math.MaxUint32, 0); err == nil {
		t.Error("a port that overflows")
	}
	if a0 != EgressBase+16*MaxEgress {
		t.Errorf("port %d", a0)
	}

	ln := &fakeListener{conns: []net.Conn{peerConn(17), peerConn(16), peerConn(2), peerConn(16)}}
	only := OnlyFrom(ln, 16)
	for range 2 {
		c, err := only.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if cid := c.RemoteAddr().(*vsock.Addr).ContextID; cid != 16 {
			t.Errorf("a connection from CID %d passed", cid)
		}
	}
	for _, c := range ln.conns {
		if pc := c.(*fakeConn); (pc.cid == 16) == pc.closed {
			t.Errorf("CID %d: closed %v", pc.cid, pc.closed)
		}
	}
}

type fakeConn struct {
	net.Conn
	cid    uint32
	closed bool
}

func peerConn(cid uint32) net.Conn       { return &fakeConn{cid: cid} }
func (c *fakeConn) RemoteAddr() net.Addr { return &vsock.Addr{ContextID: c.cid, Port: 1234} }
func (c *fakeConn) Close() error         { c.closed = true; return nil }
func (l *fakeListener) Addr() net.Addr   { return &vsock.Addr{} }
func (l *fakeListener) Close() error     { return nil }

type fakeListener struct {
	conns []net.Conn
	next  int
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if l.next >= len(l.conns) {
		return nil, io.EOF
	}
	l.next++
	return l.conns[l.next-1], nil
}
