package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
)

// splitConn sends each write in two halves a moment apart, so a reader
// sees records cut in the middle.
type splitConn struct{ net.Conn }

func (c splitConn) Write(p []byte) (int, error) {
	half := len(p) / 2
	n, err := c.Conn.Write(p[:half])
	if err != nil {
		return n, err
	}
	time.Sleep(time.Millisecond)
	m, err := c.Conn.Write(p[half:])
	return n + m, err
}

// tlsPair is a mesh TLS client and a plain crypto/tls server on the
// connection wrapServer wraps, their handshake done.
func tlsPair(t *testing.T, wrapServer func(net.Conn) net.Conn) (meshTLS, *tls.Conn) {
	t.Helper()
	ca := meshtest.NewCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		s := tls.Server(wrapServer(c), &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{ca.Issue(t, "server")},
			DynamicRecordSizingDisabled: true}) // full records from the first
		if s.Handshake() != nil {
			accepted <- nil
			return
		}
		accepted <- s
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := newMeshTLS(raw, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.Pool(), ServerName: "server"}, false)
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("the server's handshake failed")
	}
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
	})
	return client, server
}

// A mesh TLS read gives the records crypto/tls has already received, not
// one at a time; records that arrive cut in two are read whole all the
// same.
func TestMeshTLSReadsRecordsAtOnce(t *testing.T) {
	client, server := tlsPair(t, func(c net.Conn) net.Conn { return c })
	data := make([]byte, 4*(16<<10))
	_, _ = rand.Read(data)
	if _, err := server.Write(data); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // all four records on the client's socket
	buf := make([]byte, copyBuffer)
	var got []byte
	reads := 0
	for len(got) < len(data) {
		n, err := client.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got, reads = append(got, buf[:n]...), reads+1
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the records were read as other bytes")
	}
	if reads >= 4 {
		t.Errorf("four records already received took %d reads", reads)
	}

	client, server = tlsPair(t, func(c net.Conn) net.Conn { return splitConn{c} })
	data = make([]byte, 1<<20)
	_, _ = rand.Read(data)
	go func() { _, _ = server.Write(data) }()
	got = nil
	for len(got) < len(data) {
		n, err := client.Read(buf[:20<<10]) // a record and a part
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Error("records cut in two were read as other bytes")
	}
}

// scriptConn gives reads of the sizes in script, recording how much each
// read could take, then EOF.
type scriptConn struct {
	net.Conn
	script []int
	asked  []int
}

func (c *scriptConn) Read(p []byte) (int, error) {
	c.asked = append(c.asked, len(p))
	if len(c.script) == 0 {
		return 0, io.EOF
	}
	n := min(c.script[0], len(p))
	c.script = c.script[1:]
	return n, nil
}

func (c *scriptConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// A copy reads through the small buffer until a read fills it, then
// through the large one until a read brings little.
func TestCopyTakesTheLargeBufferForBulkOnly(t *testing.T) {
	src := &scriptConn{script: []int{100, smallBuffer, copyBuffer, copyBuffer / 2, 100, 100}}
	var last atomic.Int64
	if err := copyIdle(&scriptConn{}, src, &last, time.Minute); err != nil {
		t.Fatal(err)
	}
	want := []int{smallBuffer, smallBuffer, copyBuffer, copyBuffer, copyBuffer, smallBuffer, smallBuffer}
	if !slices.Equal(src.asked, want) {
		t.Errorf("reads could take %v, want %v", src.asked, want)
	}
}
