// Package channel is the enclave's only way in and out: vsock on Nitro,
// unix sockets in simulation, addressed alike. The orchestrator's API is
// one port; each port a plugin declares is reached by its own number
// (ingress: the pod's port relayed into the enclave); each egress the
// resource declares is numbered from EgressBase on the pod's side (a
// plugin's connection to a loopback port relayed out to an address in
// the cluster). The same proxy code runs over either.
package channel

import (
	"context"
	"fmt"
	"math"
	"net"
	"path/filepath"

	"github.com/mdlayher/vsock"
)

// Port numbers of the channel.
const (
	// API is the orchestrator's port.
	API = 5005
	// EgressBase numbers the egresses on the pod's side: the parent's
	// vsock ports are the node's, shared by every enclave on it, so each
	// enclave's egresses have ports of their own (EgressPort).
	EgressBase = 0x10000
	// MaxEgress is how many egresses an enclave has ports for.
	MaxEgress = 16
	// ParentCID is the parent instance's vsock address, as an enclave
	// sees it.
	ParentCID = 3
)

// Inside is the enclave's end: it listens on the plugins' ports and
// dials the pod's egresses.
type Inside interface {
	ListenPort(port uint32) (net.Listener, error)
	DialEgress(ctx context.Context, i uint32) (net.Conn, error)
}

// Outside is the pod's end: it dials the enclave's ports and listens on
// its egresses.
type Outside interface {
	DialPort(ctx context.Context, port uint32) (net.Conn, error)
	ListenEgress(i uint32) (net.Listener, error)
}

// EgressPort is the parent's vsock port of egress i of the enclave with
// context ID cid: no two enclaves on a node share one.
func EgressPort(cid, i uint32) (uint32, error) {
	if i >= MaxEgress || cid > (math.MaxUint32-EgressBase)/MaxEgress-1 {
		return 0, fmt.Errorf("no egress port for egress %d of enclave CID %d", i, cid)
	}
	return EgressBase + cid*MaxEgress + i, nil
}

// Vsock is the channel of a Nitro Enclave. CID is the enclave's, on
// either end (inside, vsock.ContextID()). Every listener takes only its
// peer: the pod's, connections from the enclave's CID; the enclave's,
// from the parent.
type Vsock struct{ CID uint32 }

// ListenPort listens on the enclave's vsock port, for the parent.
func (Vsock) ListenPort(port uint32) (net.Listener, error) {
	ln, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, err
	}
	return OnlyFrom(ln, ParentCID), nil
}

// DialEgress dials egress i on the parent.
func (v Vsock) DialEgress(_ context.Context, i uint32) (net.Conn, error) {
	port, err := EgressPort(v.CID, i)
	if err != nil {
		return nil, err
	}
	return vsock.Dial(ParentCID, port, nil)
}

// DialPort dials the enclave's port.
func (v Vsock) DialPort(_ context.Context, port uint32) (net.Conn, error) {
	return vsock.Dial(v.CID, port, nil)
}

// ListenEgress listens on the parent's vsock port of egress i of the
// enclave, for it alone.
func (v Vsock) ListenEgress(i uint32) (net.Listener, error) {
	port, err := EgressPort(v.CID, i)
	if err != nil {
		return nil, err
	}
	ln, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, err
	}
	return OnlyFrom(ln, v.CID), nil
}

// OnlyFrom passes on the connections of ln from context ID cid and closes
// the others: another enclave on the node, or a process of the parent,
// reaches nothing of this one's.
func OnlyFrom(ln net.Listener, cid uint32) net.Listener { return cidFilter{Listener: ln, cid: cid} }

type cidFilter struct {
	net.Listener
	cid uint32
}

func (f cidFilter) Accept() (net.Conn, error) {
	for {
		c, err := f.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.RemoteAddr().(*vsock.Addr); ok && a.ContextID == f.cid {
			return c, nil
		}
		_ = c.Close()
	}
}

// Unix is a simulated enclave's channel: a folder of unix sockets, one
// per port (port-N.sock) and egress (egress-N.sock), which only the pod
// can reach.
type Unix struct{ Dir string }

func (u Unix) portSocket(port uint32) string {
	return filepath.Join(u.Dir, fmt.Sprintf("port-%d.sock", port))
}
func (u Unix) egressSocket(i uint32) string {
	return filepath.Join(u.Dir, fmt.Sprintf("egress-%d.sock", i))
}

// ListenPort listens on port's socket.
func (u Unix) ListenPort(port uint32) (net.Listener, error) { return listenUnix(u.portSocket(port)) }

// DialEgress dials egress i's socket.
func (u Unix) DialEgress(ctx context.Context, i uint32) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", u.egressSocket(i))
}

// DialPort dials port's socket.
func (u Unix) DialPort(ctx context.Context, port uint32) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", u.portSocket(port))
}

// ListenEgress listens on egress i's socket.
func (u Unix) ListenEgress(i uint32) (net.Listener, error) { return listenUnix(u.egressSocket(i)) }

// listenUnix listens on path, replacing a socket a previous enclave left.
func listenUnix(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err == nil {
		return ln, nil
	}
	var d net.Dialer
	if c, derr := d.DialContext(context.Background(), "unix", path); derr == nil {
		_ = c.Close()
		return nil, err // another listener is alive
	}
	if rerr := removeSocket(path); rerr != nil {
		return nil, err
	}
	return net.Listen("unix", path)
}
