package netplan

import (
	"net/netip"
	"testing"
)

func TestPlanFitsMaxNodes(t *testing.T) {
	last := MaxNodes - 1
	for _, tt := range []struct {
		what   string
		got    netip.Addr
		want   netip.Addr
		inside netip.Prefix
	}{
		{"first node", SimNodeIP(0), netip.MustParseAddr("10.64.0.1"), SimNodes},
		{"node 256", SimNodeIP(256), netip.MustParseAddr("10.64.1.1"), SimNodes},
		{"last node", SimNodeIP(last), netip.MustParseAddr("10.64.19.136"), SimNodes},
		{"first pods", SimPodCIDR(0).Addr(), netip.MustParseAddr("10.128.0.0"), SimPods},
		{"node 256's pods", SimPodCIDR(256).Addr(), netip.MustParseAddr("10.129.0.0"), SimPods},
		{"last pods", SimPodCIDR(last).Addr(), netip.MustParseAddr("10.147.135.0"), SimPods},
		{"kubernetes Service", KubernetesService(), netip.MustParseAddr("10.251.0.1"), Services},
	} {
		if tt.got != tt.want || !tt.inside.Contains(tt.got) {
			t.Errorf("%s: %s, want %s inside %s", tt.what, tt.got, tt.want, tt.inside)
		}
	}
	if p := SimPodCIDR(last); !SimPods.Contains(p.Addr()) || p.Bits() != 24 {
		t.Errorf("the last node's pod CIDR %s is not a /24 of %s", p, SimPods)
	}
	if SimPodCIDR(1).Addr() == SimPodCIDR(0).Addr() || SimNodeIP(1) == SimNodeIP(0) {
		t.Error("two nodes share addresses")
	}
}

func TestConfinedRangesAreDisjoint(t *testing.T) {
	rs := Confined()
	for i, a := range rs {
		if !a.Prefix.IsValid() || a.Prefix != a.Prefix.Masked() {
			t.Errorf("%s is not a network prefix", a)
		}
		for _, b := range rs[i+1:] {
			if a.Prefix.Overlaps(b.Prefix) {
				t.Errorf("%s overlaps %s", a, b)
			}
		}
	}
	if !RealNode.Masked().Contains(RealNode.Addr()) || Services.Contains(RealNode.Addr()) {
		t.Errorf("the real node %s must be in its own subnet and outside %s", RealNode, Services)
	}
}
