// Package netplan owns the dev cluster's address plan: the ranges its
// simulated nodes, their pods, its Services and its real node use. The
// simulated ranges are backed by nothing: the host routing rules
// (hostnet) make them unreachable, and the API server's egress proxy
// (egress) refuses them, so a connection to them fails on this machine
// instead of leaving it.
package netplan

import (
	"fmt"
	"net/netip"
)

// MaxNodes is the most simulated nodes the plan has addresses for.
const MaxNodes = 5000

// The plan. Every range fits MaxNodes nodes; the test checks that none
// overlaps another.
var (
	// SimNodes holds the simulated nodes' InternalIPs: node i is the
	// (i+1)-th address (10.64.0.1 for node 0). 8,190 addresses.
	SimNodes = netip.MustParsePrefix("10.64.0.0/19")
	// SimPods holds the simulated nodes' pod CIDRs: node i has the i-th
	// /24 (10.128.0.0/24 for node 0), where kwok gives its pods their IPs.
	// 8,192 nodes' worth.
	SimPods = netip.MustParsePrefix("10.128.0.0/11")
	// RealNode is the real node's address on its bridge and its pod subnet.
	RealNode = netip.MustParsePrefix("10.250.0.1/24")
	// Services is the cluster's Service range. Nothing proxies it (there is
	// no kube-proxy) but KubernetesService, which the real node serves.
	Services = netip.MustParsePrefix("10.251.0.0/16")
	// Bridge is the real node's bridge.
	Bridge = "cloister0"
)

// KubernetesService is the `kubernetes` Service's address: Services' first.
func KubernetesService() netip.Addr { return Services.Addr().Next() }

// SimNodeIP is the InternalIP of simulated node i, unique per node so that
// hostPort pods on different nodes get different host IPs.
func SimNodeIP(i int) netip.Addr { return offset(SimNodes.Addr(), uint32(i)+1) } //nolint:gosec // i < MaxNodes, far below 2^32

// SimPodCIDR is the pod CIDR of simulated node i.
func SimPodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(offset(SimPods.Addr(), uint32(i)<<8), 24) //nolint:gosec // i < MaxNodes, so i<<8 stays below 2^32
}

func offset(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) //nolint:gosec // the four bytes of v: truncation is the point
}

// Range is one range of the plan that no packet may leave the host for.
type Range struct {
	Prefix netip.Prefix
	// What says what uses it, for messages.
	What string
}

func (r Range) String() string { return fmt.Sprintf("%s (%s)", r.Prefix, r.What) }

// Confined are the ranges the host must never route off the machine: the
// simulated ones, backed by nothing, and the real node's subnet, which only
// its bridge may carry.
func Confined() []Range {
	return []Range{
		{SimNodes, "the simulated nodes' addresses"},
		{SimPods, "the simulated nodes' pods"},
		{RealNode.Masked(), "the real node's pods"},
		{Services, "the dev cluster's Services"},
	}
}
