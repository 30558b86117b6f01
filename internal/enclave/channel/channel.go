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
	"net"
	"path/filepath"

	"github.com/mdlayher/vsock"
)

// Port numbers of the channel.
const (
	// API is the orchestrator's port.
	API = 5005
	// EgressBase numbers the egresses on the pod's side: EgressBase+i.
	EgressBase = 0x10000
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

// Vsock is the channel of a Nitro Enclave. CID is the enclave's (for the
// pod's end); inside the enclave it is unused, the parent being
// ParentCID.
type Vsock struct{ CID uint32 }

// ListenPort listens on the enclave's vsock port.
func (Vsock) ListenPort(port uint32) (net.Listener, error) { return vsock.Listen(port, nil) }

// DialEgress dials egress i on the parent.
func (Vsock) DialEgress(_ context.Context, i uint32) (net.Conn, error) {
	return vsock.Dial(ParentCID, EgressBase+i, nil)
}

// DialPort dials the enclave's port.
func (v Vsock) DialPort(_ context.Context, port uint32) (net.Conn, error) {
	return vsock.Dial(v.CID, port, nil)
}

// ListenEgress listens on the parent's vsock port of egress i.
func (Vsock) ListenEgress(i uint32) (net.Listener, error) { return vsock.Listen(EgressBase+i, nil) }

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
