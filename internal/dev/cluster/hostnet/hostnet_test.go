package hostnet

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// machine is a network namespace set up as a host on a network: a link
// with an address and a default route through it, so that without the
// rules every address of the plan would be routed off the machine.
func machine(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	ns := testenv.NetNS(t)
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	// A veth pair (this kernel may lack the dummy link), its peer left down.
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink"}, PeerName: "uplink-peer"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lo", "uplink"} {
		l, err := nl.LinkByName(name)
		if err == nil {
			err = nl.LinkSetUp(l)
		}
		if err == nil && name == "uplink" {
			a, _ := netlink.ParseAddr("192.0.2.2/24")
			err = nl.AddrAdd(l, a)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	addRoute(t, nl, "0.0.0.0/0")
	return ns, nl
}

func addRoute(t *testing.T, nl *netlink.Handle, dst string) {
	t.Helper()
	_, n, _ := net.ParseCIDR(dst)
	if err := nl.RouteAdd(&netlink.Route{Dst: n, Gw: net.ParseIP("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
}

// snapshot is the namespace's rules and routes.
func snapshot(t *testing.T, nl *netlink.Handle) string {
	t.Helper()
	s, err := (&Host{Handle: nl}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// probes are one address of each of the plan's ranges that nothing backs.
var probes = []netip.Addr{
	netplan.SimPodCIDR(0).Addr().Next(),
	netplan.SimNodeIP(0),
	netip.MustParseAddr("10.251.0.10"), // a Service address nothing proxies
	netip.MustParseAddr("10.250.0.7"),  // a real node's pod, without its bridge
}

// dialFails dials addr from ns and wants "no route to host" within a second.
func dialFails(t *testing.T, ns netns.NsHandle, addr netip.Addr) {
	t.Helper()
	testenv.InNetNS(t, ns, func() {
		start := time.Now()
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, 443).String(), 2*time.Second)
		if err == nil {
			_ = c.Close() // a network peer may have closed first
		}
		if !errors.Is(err, syscall.EHOSTUNREACH) || time.Since(start) > time.Second {
			t.Errorf("dialing %s: %v after %s, want no route to host at once", addr, err, time.Since(start))
		}
	})
}

func TestRulesKeepThePlanOnTheMachine(t *testing.T) {
	ns, nl := machine(t)
	before := snapshot(t, nl)
	h := &Host{Handle: nl, RecordDir: t.TempDir()}
	for _, p := range probes {
		if err := h.Unreachable(p); err == nil {
			t.Fatalf("%s is unreachable before the rules: the namespace does not stand for a host on a network", p)
		}
	}
	a, b := t.TempDir(), t.TempDir()
	if err := h.Acquire(a); err != nil {
		t.Fatal(err)
	}
	// The kernel first, so that no probe is dialled should the rules not hold.
	for _, p := range probes {
		if err := h.Unreachable(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range probes {
		dialFails(t, ns, p)
	}

	// The real node's bridge: its subnet goes to it, its Service address is
	// local, and what its pods send elsewhere goes nowhere.
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: netplan.Bridge}}
	if err := nl.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{netplan.RealNode.String(), netplan.KubernetesService().String() + "/32"} {
		a, _ := netlink.ParseAddr(addr)
		if err := nl.AddrAdd(br, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := nl.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	if rs, err := nl.RouteGet(net.ParseIP("10.250.0.7")); err != nil || len(rs) == 0 || rs[0].LinkIndex != br.Attrs().Index {
		t.Errorf("a real node's pod: %v %v, want the route through %s", rs, err, netplan.Bridge)
	}
	if rs, err := nl.RouteGet(net.ParseIP(netplan.KubernetesService().String())); err != nil || len(rs) == 0 || rs[0].Type != syscall.RTN_LOCAL {
		t.Errorf("the kubernetes Service: %v %v, want a local address", rs, err)
	}
	if err := h.Unreachable(netip.MustParseAddr("10.251.0.10")); err != nil {
		t.Error(err)
	}
	testenv.InNetNS(t, ns, func() {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	fromPod := &netlink.RouteGetOptions{Iif: netplan.Bridge, SrcAddr: net.ParseIP("10.250.0.7")}
	if rs, err := nl.RouteGetWithOptions(net.ParseIP("192.0.2.77"), fromPod); err == nil {
		t.Errorf("a real node's pod is routed off the machine: %v", rs)
	}
	if rs, err := nl.RouteGetWithOptions(net.ParseIP("192.0.2.2"), fromPod); err != nil || len(rs) == 0 || rs[0].Type != syscall.RTN_LOCAL {
		t.Errorf("a real node's pod does not reach the host's own address: %v %v", rs, err)
	}

	// The rules are the host's: the first cluster's release leaves them to
	// the second, whose release removes them.
	if err := h.Acquire(b); err != nil {
		t.Fatal(err)
	}
	if users, err := h.Users(); err != nil || !slices.Equal(users, []string{a, b}) {
		t.Fatalf("users %v %v, want %v", users, err, []string{a, b})
	}
	if err := h.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := h.Unreachable(probes[0]); err != nil {
		t.Fatalf("after the first of two clusters went down: %v", err)
	}
	if err := nl.LinkDel(br); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(b); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, nl); after != before {
		t.Errorf("routes and rules after the last cluster:\n%s\nbefore the first:\n%s", after, before)
	}
	if _, err := os.Stat(filepath.Join(h.RecordDir, "network.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record outlives its last user: %v", err)
	}
}

// A second cluster's Acquire finds every rule in place and leaves it: the
// first cluster's traffic must not leave during a replacement.
func TestAcquireKeepsRulesInPlace(t *testing.T) {
	_, nl := machine(t)
	h := &Host{Handle: nl, RecordDir: t.TempDir()}
	if err := h.Acquire(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	have, err := nl.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range rules() {
		if !slices.ContainsFunc(have, func(r netlink.Rule) bool { return sameRule(&r, w) }) {
			t.Errorf("rule %d is not recognised as in place: a second Acquire would replace it", w.Priority)
		}
	}
	if err := h.Acquire(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// Someone else's rule at the plan's priorities is neither replaced nor
// removed.
func TestOthersRulesStay(t *testing.T) {
	_, nl := machine(t)
	other := netlink.NewRule()
	other.Priority, other.Family, other.Table = prefConfined, netlink.FAMILY_V4, 77
	if err := nl.RuleAdd(other); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, nl)
	h := &Host{Handle: nl, RecordDir: t.TempDir()}
	user := t.TempDir()
	if err := h.Acquire(user); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(user); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, nl); after != before {
		t.Errorf("after the plan's rules came and went:\n%s\nbefore:\n%s", after, before)
	}
}

func TestAcquireRefusesAnOverlappingRoute(t *testing.T) {
	_, nl := machine(t)
	addRoute(t, nl, "10.0.0.0/8")
	before := snapshot(t, nl)
	h := &Host{Handle: nl, RecordDir: t.TempDir()}
	err := h.Acquire(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "the route 10.0.0.0/8 via 192.0.2.1 dev uplink") {
		t.Fatalf("Acquire: %v, want a refusal naming the route", err)
	}
	if after := snapshot(t, nl); after != before {
		t.Errorf("a refused Acquire changed the routing:\n%s", after)
	}
}

func TestReleaseForgetsRemovedClusters(t *testing.T) {
	_, nl := machine(t)
	before := snapshot(t, nl)
	h := &Host{Handle: nl, RecordDir: t.TempDir()}
	gone, kept := t.TempDir(), t.TempDir()
	for _, u := range []string{gone, kept} {
		if err := h.Acquire(u); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(kept); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, nl); after != before {
		t.Errorf("a cluster removed without `dev down` keeps the rules:\n%s", after)
	}
}
