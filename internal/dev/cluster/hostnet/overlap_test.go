package hostnet

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
)

func TestOverlaps(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	for _, tt := range []struct {
		name  string
		route Route
		want  []string // the ranges it conflicts with
		says  string
	}{
		{name: "an office's 10/8", route: Route{Dst: p("10.0.0.0/8"), Gw: a("192.168.1.1"), Dev: "tun0", Table: 254},
			want: []string{"10.64.0.0/19", "10.128.0.0/11", "10.250.0.0/24", "10.251.0.0/16"}, says: "the route 10.0.0.0/8 via 192.168.1.1 dev tun0"},
		{name: "a VPN's table", route: Route{Dst: p("10.130.0.0/16"), Dev: "wg0", Table: 51820},
			want: []string{"10.128.0.0/11"}, says: "dev wg0 (table 51820)"},
		{name: "an address in the plan", route: Route{Dst: p("10.251.3.4/32"), Dev: "eth1", Table: 255, Local: true},
			want: []string{"10.251.0.0/16"}, says: "the address 10.251.3.4 dev eth1"},
		{name: "a bridge beside the plan", route: Route{Dst: p("10.250.1.0/24"), Dev: "br0", Table: 254}},
		{name: "docker0", route: Route{Dst: p("172.17.0.0/16"), Dev: "docker0", Table: 254}},
		{name: "a default route", route: Route{Dst: p("0.0.0.0/0"), Gw: a("192.0.2.1"), Dev: "eth0", Table: 254}},
		{name: "a VPN's split default", route: Route{Dst: p("0.0.0.0/1"), Dev: "tun0", Table: 254}},
		{name: "the plan's own table", route: Route{Dst: p("10.128.0.0/11"), Table: Table}},
		{name: "the real node's bridge", route: Route{Dst: p("10.250.0.0/24"), Dev: netplan.Bridge, Table: 254}},
		{name: "the kubernetes Service on the bridge", route: Route{Dst: p("10.251.0.1/32"), Dev: netplan.Bridge, Table: 255, Local: true}},
		{name: "IPv6", route: Route{Dst: p("fd00::/8"), Dev: "eth0", Table: 254}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := Overlaps(netplan.Confined(), []Route{tt.route})
			var got []string
			for _, c := range cs {
				got = append(got, c.Range.Prefix.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("conflicts %v, want %v", got, tt.want)
			}
			if len(cs) == 0 {
				return
			}
			msg := OverlapError(cs).Error()
			if !strings.Contains(msg, tt.says) || !strings.Contains(msg, cs[0].Range.What) || !strings.Contains(msg, "without that route") {
				t.Errorf("%q should name %q, what the range is for, and the fix", msg, tt.says)
			}
		})
	}
}
