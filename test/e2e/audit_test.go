//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cloister-cc/cloister/internal/dev/cluster/hostnet"
	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// The network audit: while the suite runs, nftables counters (count only,
// never drop) on the host's prerouting, output and forward paths count
// every packet for the plan's simulated ranges. At the end only the
// audit's own deliberate probe, sent from a network namespace it made
// itself, may have been counted: a packet of anyone else's that reached
// those hooks was on its way off the machine, or came from a pod trying.

// Each suite's audit is its own (two suites may run on one host at once):
// its table, link and /30 of the benchmarking range (198.18.0.0/15) are
// named by its process; a killed suite's are removed by the next one.
const auditPrefix = "cloister-e2e-audit-"

var (
	auditTable = auditPrefix + strconv.Itoa(os.Getpid())
	auditLink  = auditLinkOf(os.Getpid())
	auditNet   = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + byte(os.Getpid()>>14&1), byte(os.Getpid() >> 6), byte(os.Getpid() << 2)}), 30)
	auditHost  = netip.PrefixFrom(auditNet.Addr().Next(), 30)
	auditProbe = netip.PrefixFrom(auditHost.Addr().Next(), 30)
)

// auditLinkOf is the host end of a suite's veth pair (at most 15 bytes).
func auditLinkOf(pid int) string { return "cla" + strconv.FormatInt(int64(pid), 36) }

// removeStaleAudits removes the tables and links of suites no longer running.
func removeStaleAudits(conn *nftables.Conn) {
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return
	}
	for _, t := range tables {
		pid, err := strconv.Atoi(strings.TrimPrefix(t.Name, auditPrefix))
		if !strings.HasPrefix(t.Name, auditPrefix) || err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		conn.DelTable(t)
		_ = netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: auditLinkOf(pid)}})
	}
	_ = conn.Flush()
}

// audited are the ranges counted: the simulated ones, and the Services
// but the one address the real node serves.
func audited() []netip.Prefix {
	return []netip.Prefix{netplan.SimNodes, netplan.SimPods, netplan.Services}
}

type audit struct {
	conn   *nftables.Conn
	table  *nftables.Table
	probe  netns.NsHandle
	probes int // probes sent
}

// netAudit is the suite's audit; nil without root.
var netAudit *audit

// startAudit installs the counters and the probe's namespace; without root
// it says why it cannot.
func startAudit() (*audit, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the network audit needs root (nftables, a network namespace)")
	}
	conn, err := nftables.New()
	if err != nil {
		return nil, err
	}
	removeStaleAudits(conn)
	a := &audit{conn: conn, table: &nftables.Table{Name: auditTable, Family: nftables.TableFamilyINet}}
	conn.AddTable(a.table)
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
		prio *nftables.ChainPriority
	}{
		{"prerouting", nftables.ChainHookPrerouting, nftables.ChainPriorityRaw},
		{"output", nftables.ChainHookOutput, nftables.ChainPriorityRaw},
		{"forward", nftables.ChainHookForward, nftables.ChainPriorityFilter},
	} {
		ch := conn.AddChain(&nftables.Chain{Name: h.name, Table: a.table, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: h.prio, Policy: ptrPolicy(nftables.ChainPolicyAccept)})
		for _, p := range audited() {
			// The probe's packets first: they stop at their own counter.
			conn.AddRule(&nftables.Rule{Table: a.table, Chain: ch, UserData: []byte("probe " + p.String()),
				Exprs: slices.Concat(ipv4(), matchAddr(12, auditProbe.Addr()), matchPrefix(16, p), []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictReturn}})})
			conn.AddRule(&nftables.Rule{Table: a.table, Chain: ch, UserData: []byte("other " + p.String()),
				Exprs: slices.Concat(ipv4(), notAddr(16, netplan.KubernetesService()), matchPrefix(16, p), []expr.Any{&expr.Counter{}})})
		}
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("installing the audit's counters: %w", err)
	}
	if err := a.startProbe(); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

func ptrPolicy(p nftables.ChainPolicy) *nftables.ChainPolicy { return &p }

func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// matchPrefix: the IPv4 address at offset (12 source, 16 destination) is in p.
func matchPrefix(offset uint32, p netip.Prefix) []expr.Any {
	mask := net.CIDRMask(p.Bits(), 32)
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

func matchAddr(offset uint32, a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

func notAddr(offset uint32, a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: a.AsSlice()},
	}
}

// startProbe makes the probe's namespace, linked to the host by a veth
// pair, its default route the host.
func (a *audit) startProbe() error {
	var err error
	if a.probe, err = testenv.NewNetNS(); err != nil {
		return fmt.Errorf("the audit's probe namespace: %w", err)
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: auditLink}, PeerName: auditLink + "p"}); err != nil {
		return fmt.Errorf("the audit's veth pair: %w", err)
	}
	host, err := netlink.LinkByName(auditLink)
	if err != nil {
		return err
	}
	peer, err := netlink.LinkByName(auditLink + "p")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetNsFd(peer, int(a.probe)); err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(auditHost)}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	nl, err := netlink.NewHandleAt(a.probe)
	if err != nil {
		return err
	}
	defer nl.Close()
	for _, name := range []string{"lo", auditLink + "p"} {
		l, err := nl.LinkByName(name)
		if err == nil {
			err = nl.LinkSetUp(l)
		}
		if err != nil {
			return err
		}
	}
	p, _ := nl.LinkByName(auditLink + "p")
	if err := nl.AddrAdd(p, &netlink.Addr{IPNet: ipNet(auditProbe)}); err != nil {
		return err
	}
	return nl.RouteAdd(&netlink.Route{Gw: auditHost.Addr().AsSlice(), LinkIndex: p.Attrs().Index})
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

// sendProbe dials a simulated pod's address from the probe's namespace:
// the host counts it in prerouting and refuses to route it. It is sent
// only while the kernel has no route to that address: never off the
// machine.
func (a *audit) sendProbe() error {
	dst := netplan.SimPodCIDR(0).Addr().Next()
	if err := (&hostnet.Host{}).Unreachable(dst); err != nil {
		return fmt.Errorf("the audit's probe was not sent: %w", err)
	}
	a.probes++
	before, err := a.probed()
	if err != nil {
		return err
	}
	var dialErr error
	err = testenv.Enter(a.probe, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dst, 443).String(), time.Second)
		if err == nil {
			_ = c.Close()
			return fmt.Errorf("the audit's probe reached %s", dst)
		}
		dialErr = err
		return nil
	})
	if err != nil {
		return err
	}
	after, err := a.probed()
	if err != nil {
		return err
	}
	if after == before {
		links := "?"
		_ = testenv.Enter(a.probe, func() error {
			if ls, err := netlink.LinkList(); err == nil {
				var names []string
				for _, l := range ls {
					names = append(names, fmt.Sprintf("%s(%s)", l.Attrs().Name, l.Attrs().OperState))
				}
				links = strings.Join(names, " ")
			}
			return nil
		})
		return fmt.Errorf("the audit's probe to %s was not counted (the dial said %w; the probe's links: %s)", dst, dialErr, links)
	}
	return nil
}

// probed is how many of the probe's packets the host counted.
func (a *audit) probed() (uint64, error) {
	counts, err := a.counts()
	var n uint64
	for name, c := range counts {
		if strings.HasPrefix(name, "prerouting probe ") {
			n += c
		}
	}
	return n, err
}

// counts reads every counter, by its rule's name and hook.
func (a *audit) counts() (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, hook := range []string{"prerouting", "output", "forward"} {
		rules, err := a.conn.GetRules(a.table, &nftables.Chain{Name: hook, Table: a.table})
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if c, ok := e.(*expr.Counter); ok {
					out[hook+" "+string(r.UserData)] += c.Packets
				}
			}
		}
	}
	return out, nil
}

// finish checks the counters: the probes the suite sent counted, nothing
// else. The counters and the probe's namespace go either way.
func (a *audit) finish() error {
	counts, err := a.counts()
	a.stop()
	if err != nil {
		return err
	}
	var probed uint64
	var others []string
	for name, n := range counts {
		switch {
		case strings.HasPrefix(name, "prerouting probe "):
			probed += n
		case n > 0:
			others = append(others, fmt.Sprintf("%s: %d packets", name, n))
		}
	}
	slices.Sort(others)
	if a.probes > 0 && probed == 0 {
		return errors.New("the network audit counted not even its own probe: its counters do not see the simulated ranges")
	}
	if len(others) > 0 {
		return fmt.Errorf("packets for the dev cluster's simulated addresses reached the host's hooks: %s", strings.Join(others, "; "))
	}
	if a.probes == 0 {
		fmt.Printf("network audit: no packet for the simulated ranges %v (no probe was sent, so the counters were not shown to count)\n", audited())
		return nil
	}
	fmt.Printf("network audit: no packet for the simulated ranges %v but the audit's own probe (%d packets)\n", audited(), probed)
	return nil
}

func (a *audit) stop() {
	a.conn.DelTable(a.table)
	_ = a.conn.Flush()
	_ = netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: auditLink}})
	_ = a.probe.Close()
}

// hostRouting is the host's IPv4 rules and the routes of every table,
// which the suite must leave as it found them.
func hostRouting() (string, error) { return (&hostnet.Host{}).Snapshot() }
