// Package hostnet owns what the dev cluster changes in the host's routing:
// policy-routing rules, ahead of every other table but the local one, that
// make the address plan's simulated ranges unreachable (so a connection to
// a simulated pod, node or Service fails on this machine with "no route to
// host" instead of leaving it), let the real node's subnet reach only its
// bridge, and keep the real node's pods from sending anything beyond the
// machine. The rules belong to the host, not to one cluster: the first
// cluster up adds them, the last one down removes them, and a record in
// /run (cleared at boot, as the rules are) says which clusters use them.
package hostnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

// Table is the routing table of the plan's unreachable routes.
const Table = 3025

// Rule priorities: after the local table (0), before any other, VPNs'
// included (Tailscale's are 5210 and up, wg-quick's 32764).
const (
	// prefRealNode: the real node's subnet takes only main's bridge route
	// (routes wider than the subnet are suppressed), else falls through.
	prefRealNode = 90
	// prefConfined: Table, whose unreachable routes end the lookup.
	prefConfined = 91
	// prefPods: what the real node's pods send off their bridge that is
	// not for this machine (the local table answered that) goes nowhere.
	prefPods = 92
)

// DefaultRecordDir holds the record of the clusters using the rules.
const DefaultRecordDir = "/run/cloister-dev"

// ErrNotRoot: the rules need root.
var ErrNotRoot = errors.New("changing the host's routing rules needs root")

// Host is one network namespace's routing, with the record of its users.
type Host struct {
	// Handle reaches the namespace; nil is the process's own.
	Handle *netlink.Handle
	// RecordDir holds the record and its lock; empty is DefaultRecordDir.
	RecordDir string
}

func (h *Host) handle() *netlink.Handle {
	if h.Handle == nil {
		return &netlink.Handle{}
	}
	return h.Handle
}

func (h *Host) recordDir() string {
	if h.RecordDir == "" {
		return DefaultRecordDir
	}
	return h.RecordDir
}

// Check refuses a plan that overlaps the host's routes. It needs no root.
func (h *Host) Check() error {
	routes, err := h.Routes()
	if err != nil {
		return err
	}
	if cs := Overlaps(netplan.Confined(), routes); len(cs) > 0 {
		return OverlapError(cs)
	}
	return nil
}

// Acquire checks the plan against the host's routes, installs the rules
// (again, should they have been removed behind the record's back) and
// records user, a cluster's folder, among their users.
func (h *Host) Acquire(user string) error {
	if err := h.Check(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return h.withRecord(func(users []string) ([]string, error) {
		if err := h.install(); err != nil {
			return nil, err
		}
		if !slices.Contains(users, user) {
			users = append(users, user)
		}
		return users, nil
	})
}

// Release takes user off the record; the last user's release removes the
// rules. Users whose folders are gone (a cluster removed by hand) are
// dropped on the way.
func (h *Host) Release(user string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return h.withRecord(func(users []string) ([]string, error) {
		users = slices.DeleteFunc(users, func(u string) bool { return u == user })
		if len(users) == 0 {
			return nil, h.remove()
		}
		return users, nil
	})
}

// Users lists the clusters the record names (those whose folders exist).
func (h *Host) Users() ([]string, error) {
	var out []string
	err := h.withRecord(func(users []string) ([]string, error) {
		out = slices.Clone(users)
		return users, nil
	})
	return out, err
}

type record struct {
	Clusters []string `json:"clusters"`
}

// withRecord runs update on the record's live users under its lock and
// writes what it returns (removing the record when none are left).
func (h *Host) withRecord(update func(users []string) ([]string, error)) error {
	dir := h.recordDir()
	unlock, err := toolchain.Lock(filepath.Join(dir, "network.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	path := filepath.Join(dir, "network.json")
	var rec record
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the record of the dev clusters' routing rules: %w", err)
	default:
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("the record of the dev clusters' routing rules %s: %w; remove it and run `cloister dev up` again", path, err)
		}
	}
	users := slices.DeleteFunc(rec.Clusters, func(u string) bool {
		_, err := os.Stat(u)
		return errors.Is(err, os.ErrNotExist)
	})
	users, err = update(users)
	if err != nil {
		return err
	}
	if len(users) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err = json.MarshalIndent(record{Clusters: users}, "", "  ")
	if err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(path, data, 0o644)
	return err
}

// rules are the host's rules, IPv4 only: nothing of the plan is IPv6.
func rules() []*netlink.Rule {
	realNode := netlink.NewRule()
	realNode.Priority, realNode.Family = prefRealNode, unix.AF_INET
	realNode.Dst = ipNet(netplan.RealNode.Masked())
	realNode.Table = unix.RT_TABLE_MAIN
	realNode.SuppressPrefixlen = netplan.RealNode.Bits() - 1

	confined := netlink.NewRule()
	confined.Priority, confined.Family = prefConfined, unix.AF_INET
	confined.Table = Table

	pods := netlink.NewRule()
	pods.Priority, pods.Family = prefPods, unix.AF_INET
	pods.IifName = netplan.Bridge
	pods.Type = unix.FR_ACT_UNREACHABLE
	return []*netlink.Rule{realNode, confined, pods}
}

func routes() []*netlink.Route {
	var out []*netlink.Route
	for _, r := range netplan.Confined() {
		out = append(out, &netlink.Route{Dst: ipNet(r.Prefix), Table: Table, Type: unix.RTN_UNREACHABLE, Family: unix.AF_INET})
	}
	return out
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// install puts the routes, then the rules, in place. Rules already as
// defined stay (another cluster relies on them, so they must not blink);
// rules of an older definition at the same priorities are replaced.
func (h *Host) install() error {
	nl := h.handle()
	for _, r := range routes() {
		if err := nl.RouteReplace(r); err != nil {
			return fmt.Errorf("adding unreachable route %s to table %d: %w", r.Dst, Table, err)
		}
	}
	want := rules()
	if err := h.deleteRules(func(r *netlink.Rule) bool {
		return !slices.ContainsFunc(want, func(w *netlink.Rule) bool { return sameRule(r, w) })
	}); err != nil {
		return err
	}
	have, err := nl.RuleList(unix.AF_INET)
	if err != nil {
		return fmt.Errorf("listing routing rules: %w", err)
	}
	for _, w := range want {
		if slices.ContainsFunc(have, func(r netlink.Rule) bool { return sameRule(&r, w) }) {
			continue
		}
		if err := nl.RuleAdd(w); err != nil {
			return fmt.Errorf("adding routing rule %d: %w", w.Priority, err)
		}
	}
	return nil
}

// sameRule: r, as the kernel lists it, is w. The rule's action is not read
// back by netlink; an unreachable rule is the one without a table.
func sameRule(r, w *netlink.Rule) bool {
	return r.Priority == w.Priority && r.Table == w.Table && r.IifName == w.IifName &&
		r.SuppressPrefixlen == w.SuppressPrefixlen && r.Dst.String() == w.Dst.String()
}

// remove deletes the rules, then the table's routes.
func (h *Host) remove() error {
	if err := h.deleteRules(func(*netlink.Rule) bool { return true }); err != nil {
		return err
	}
	nl := h.handle()
	rs, err := nl.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: Table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing table %d: %w", Table, err)
	}
	for i := range rs {
		if err := nl.RouteDel(&rs[i]); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("deleting route %s of table %d: %w", rs[i].Dst, Table, err)
		}
	}
	return nil
}

// deleteRules removes the plan's IPv4 rules (of this definition or an
// older one: those at its priorities that look up its table or main for
// the real node's subnet, or match its bridge) that which selects.
// Anyone else's are left.
func (h *Host) deleteRules(which func(*netlink.Rule) bool) error {
	nl := h.handle()
	have, err := nl.RuleList(unix.AF_INET)
	if err != nil {
		return fmt.Errorf("listing routing rules: %w", err)
	}
	for i := range have {
		r := &have[i]
		ours := r.Priority >= prefRealNode && r.Priority <= prefPods &&
			(r.Table == Table || r.IifName == netplan.Bridge || r.Dst != nil && r.Dst.String() == netplan.RealNode.Masked().String())
		if !ours || !which(r) {
			continue
		}
		if err := nl.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("deleting routing rule %d: %w", r.Priority, err)
		}
	}
	return nil
}

// Routes reads every IPv4 route of every table, naming their devices.
func (h *Host) Routes() ([]Route, error) {
	nl := h.handle()
	rs, err := nl.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing the host's routes: %w", err)
	}
	names := map[int]string{}
	if links, err := nl.LinkList(); err == nil {
		for _, l := range links {
			names[l.Attrs().Index] = l.Attrs().Name
		}
	}
	out := make([]Route, 0, len(rs))
	for _, r := range rs {
		if r.Dst == nil {
			continue // a default route
		}
		dst, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		bits, _ := r.Dst.Mask.Size()
		gw, _ := netip.AddrFromSlice(r.Gw)
		out = append(out, Route{Dst: netip.PrefixFrom(dst.Unmap(), bits), Gw: gw.Unmap(), Dev: names[r.LinkIndex], Table: r.Table, Local: r.Type == unix.RTN_LOCAL})
	}
	return out, nil
}

// Unreachable asks the kernel for the route to addr (as `ip route get`)
// and reports nil only when it has none: the rules hold for addr.
func (h *Host) Unreachable(addr netip.Addr) error {
	rs, err := h.handle().RouteGet(addr.AsSlice())
	switch {
	case errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH):
		return nil
	case err != nil:
		return fmt.Errorf("looking up the route to %s: %w", addr, err)
	case len(rs) == 0:
		return nil
	}
	return fmt.Errorf("%s is routable (via %s, device index %d): the dev cluster's rules do not hold", addr, rs[0].Gw, rs[0].LinkIndex)
}

// Snapshot is the namespace's IPv4 rules and the routes of every table, one
// line each in a stable order: what the rules' users compare before and
// after.
func (h *Host) Snapshot() (string, error) {
	nl := h.handle()
	rules, err := nl.RuleList(unix.AF_INET)
	if err != nil {
		return "", fmt.Errorf("listing routing rules: %w", err)
	}
	routes, err := nl.RouteListFiltered(unix.AF_INET, &netlink.Route{}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", fmt.Errorf("listing the host's routes: %w", err)
	}
	var lines []string
	for _, r := range rules {
		lines = append(lines, fmt.Sprintf("rule %d to %v table %d iif %q type %d", r.Priority, r.Dst, r.Table, r.IifName, r.Type))
	}
	for _, r := range routes {
		lines = append(lines, "route "+r.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}
