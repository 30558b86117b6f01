package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// OriginalDst is where a redirected TCP connection was sent before the
// redirect changed its destination to the proxy: conntrack keeps it
// (SO_ORIGINAL_DST).
func OriginalDst(conn net.Conn) (netip.AddrPort, error) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var dst netip.AddrPort
	var serr error
	v4 := tc.LocalAddr().(*net.TCPAddr).IP.To4() != nil
	err = raw.Control(func(fd uintptr) {
		if v4 {
			// sockaddr_in fits the 16 bytes of an ip_mreq's address:
			// family, port, address.
			var m *unix.IPv6Mreq
			if m, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST); serr == nil {
				dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), binary.BigEndian.Uint16(m.Multiaddr[2:4]))
			}
			return
		}
		// sockaddr_in6 as the address of an ip6_mtuinfo.
		var m *unix.IPv6MTUInfo
		if m, serr = unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, unix.SO_ORIGINAL_DST); serr == nil {
			// The port is in network order in memory.
			port := binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, m.Addr.Port))
			dst = netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr), port)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("the original destination of %s: %w", conn.RemoteAddr(), err)
	}
	return dst, nil
}
