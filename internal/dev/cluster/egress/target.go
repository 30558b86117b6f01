package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
)

// maxTarget bounds a CONNECT target: an IPv6 address with a zone and a
// port fits many times over.
const maxTarget = 256

// ParseTarget reads a CONNECT request's target: an IP address and a port.
// Names are refused, so that what is checked is what is dialled, except
// "localhost", which is 127.0.0.1.
func ParseTarget(s string) (netip.AddrPort, error) {
	if len(s) > maxTarget {
		return netip.AddrPort{}, fmt.Errorf("target of %d bytes: at most %d", len(s), maxTarget)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("target %q: %w: use ADDRESS:PORT", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return netip.AddrPort{}, fmt.Errorf("target %q: port %q is not a port number", s, port)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("target %q: %q is not an IP address: the egress proxy resolves no names", s, host)
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(p)), nil
}

// Route is what the kernel says of the way to an address.
type Route struct {
	Local bool   // an address of this host
	Dev   string // the output device
	Gw    bool   // through a gateway
}

// Judge says why addr is not on this machine, or nil: loopback, the
// host's own addresses and the real node's bridge are; everything else,
// the plan's simulated ranges first, is not. route is the kernel's route
// to addr, or the error of its lookup (no route). Pure.
func Judge(addr netip.Addr, route Route, routeErr error) error {
	if addr.IsLoopback() {
		return nil
	}
	if routeErr == nil && (route.Local || route.Dev == netplan.Bridge && !route.Gw) {
		return nil
	}
	switch {
	case netplan.SimNodes.Contains(addr), netplan.SimPods.Contains(addr):
		return fmt.Errorf("%s is a simulated node's address: nothing runs there", addr)
	case netplan.RealNode.Masked().Contains(addr):
		return fmt.Errorf("%s is on the real node's network, which is not up", addr)
	case netplan.Services.Contains(addr):
		return fmt.Errorf("%s is a Service address: the dev cluster has no Service proxy", addr)
	}
	return fmt.Errorf("%s is not on this machine: the dev cluster sends nothing beyond it", addr)
}
