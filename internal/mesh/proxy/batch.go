package proxy

import (
	"crypto/tls"
	"net"
	"sync/atomic"
)

// batchConn is the network side of a mesh TLS connection. crypto/tls's
// Read gives one record (16 KiB at most) at a time, though it reads all
// the network has: each would be a write of its own on the other side.
// While noWait is set, batchConn's Read does not wait for the network, so
// crypto/tls gives only what it already has.
type batchConn struct {
	net.Conn
	noWait atomic.Bool
}

// errWouldWait is batchConn's Read refusing to wait: temporary, so
// crypto/tls keeps the connection and any part of a record it holds.
type errWouldWait struct{}

func (errWouldWait) Error() string   { return "would wait for the network" }
func (errWouldWait) Timeout() bool   { return true }
func (errWouldWait) Temporary() bool { return true }

func (b *batchConn) Read(p []byte) (int, error) {
	if b.noWait.Load() {
		return 0, errWouldWait{}
	}
	return b.Conn.Read(p)
}

// meshTLS is a mesh TLS connection over a batchConn.
type meshTLS struct {
	*tls.Conn
	raw *batchConn
}

// Read reads at least one record, then every further one crypto/tls has
// already received, up to len(p): a batch for one write on the other side.
func (m meshTLS) Read(p []byte) (int, error) {
	n, err := m.Conn.Read(p)
	if err != nil || n == len(p) {
		return n, err
	}
	m.raw.noWait.Store(true)
	defer m.raw.noWait.Store(false)
	for n < len(p) {
		more, err := m.Conn.Read(p[n:])
		n += more
		if err != nil {
			// errWouldWait, or one crypto/tls keeps and returns on the
			// next Read.
			break
		}
	}
	return n, nil
}

// newMeshTLS makes conn a TLS connection of cfg, as server or client.
func newMeshTLS(conn net.Conn, cfg *tls.Config, server bool) meshTLS {
	raw := &batchConn{Conn: conn}
	if server {
		return meshTLS{tls.Server(raw, cfg), raw}
	}
	return meshTLS{tls.Client(raw, cfg), raw}
}
