package hostnet

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
)

// Route is one route of the host, as the overlap check reads it.
type Route struct {
	Dst   netip.Prefix
	Gw    netip.Addr // invalid: directly connected, or not forwarded
	Dev   string
	Table int
	// Local: the route of an address of this host (the local table's).
	Local bool
}

func (r Route) String() string {
	var b strings.Builder
	if r.Local {
		fmt.Fprintf(&b, "the address %s", r.Dst.Addr())
	} else {
		fmt.Fprintf(&b, "the route %s", r.Dst)
	}
	if r.Gw.IsValid() {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	if r.Dev != "" {
		fmt.Fprintf(&b, " dev %s", r.Dev)
	}
	if !r.Local && r.Table != mainTable {
		fmt.Fprintf(&b, " (table %d)", r.Table)
	}
	return b.String()
}

const (
	mainTable = 254
	// minOverlapBits: a route wider than a /8 is a default route or a
	// split of one (a VPN's 0.0.0.0/1 and 128.0.0.0/1), behind which no one
	// numbered a network; the rules take precedence over it.
	minOverlapBits = 8
)

// Conflict is a range of the plan the host already routes elsewhere.
type Conflict struct {
	Range netplan.Range
	Route Route
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s overlaps %s", c.Range, c.Route)
}

// Overlaps lists the plan's ranges that routes of the host already cover
// or cut into: a VPN's, a container bridge's, an office network's. The
// dev cluster's own (its table, the real node's bridge) are not
// conflicts. Pure.
func Overlaps(ranges []netplan.Range, routes []Route) []Conflict {
	var out []Conflict
	for _, r := range routes {
		if !r.Dst.Addr().Is4() || r.Dst.Bits() < minOverlapBits || r.Table == Table || r.Dev == netplan.Bridge {
			continue
		}
		for _, rg := range ranges {
			if rg.Prefix.Overlaps(r.Dst) {
				out = append(out, Conflict{Range: rg, Route: r})
			}
		}
	}
	return out
}

// OverlapError refuses a plan that overlaps the host's routes.
type OverlapError []Conflict

func (e OverlapError) Error() string {
	lines := make([]string, len(e))
	for i, c := range e {
		lines[i] = c.String()
	}
	return fmt.Sprintf("the dev cluster's addresses overlap this host's network: %s; "+
		"the dev cluster makes its ranges unreachable from this host, so those addresses would be cut off: "+
		"run it on a machine (or in a network namespace) without that route",
		strings.Join(lines, "; "))
}
