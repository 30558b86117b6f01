package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoNft says what to install.
var ErrNoNft = errors.New("nft is not installed: the real node's hostPorts (LAS at the node's address, port 18766) are nftables rules the CNI portmap plugin makes with it (apt-get install nftables)")

// HostTools checks that the host has the distribution's tools a real node
// runs: runc and nft.
func HostTools() error {
	if _, err := Runc(); err != nil {
		return err
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return ErrNoNft
	}
	return nil
}

// hostPortTables are the nftables tables the portmap plugin keeps
// hostPort rules in (its nftables backend's name, in both families).
var hostPortTables = [][2]string{{"ip", "cni_hostport"}, {"ip6", "cni_hostport"}}

// recordHostPortTables writes to file which of the portmap plugin's tables
// do not exist yet, unless file exists: those are the node's to remove.
func recordHostPortTables(file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	var missing []string
	for _, t := range hostPortTables {
		if exec.Command("nft", "list", "table", t[0], t[1]).Run() != nil {
			missing = append(missing, t[0]+" "+t[1])
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(strings.Join(missing, "\n")), 0o600)
}

// removeHostPortTables deletes the tables recordHostPortTables found
// missing: the rules of pods killed without a CNI DEL go with them. A table
// that existed before is someone else's and stays.
func removeHostPortTables(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(string(data), "\n") {
		family, table, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if exec.Command("nft", "list", "table", family, table).Run() != nil {
			continue // never made, or gone
		}
		if out, err := exec.Command("nft", "delete", "table", family, table).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing nftables table %s %s: %w: %s", family, table, err, out))
		}
	}
	return errors.Join(errs...)
}

// hostPortRule is one of the portmap plugin's rules: its comment is the
// pod sandbox it was made for.
type hostPortRule struct {
	Family  string `json:"family"`
	Table   string `json:"table"`
	Chain   string `json:"chain"`
	Handle  int    `json:"handle"`
	Comment string `json:"comment"`
	// addrs are the addresses the rule names (the pod's, in a DNAT or a
	// masquerade).
	addrs []netip.Addr
}

// staleHostPortRules picks from a table's listing (nft -j) the rules that
// name an address in pods but no sandbox in live: an earlier node's, whose
// pods were killed without a CNI DEL and whose record of the table went
// with its folder. The first rule for a port wins, so one such rule sends
// the port to a pod that is gone ("no route to host").
func staleHostPortRules(listing []byte, pods netip.Prefix, live map[string]bool) ([]hostPortRule, error) {
	var doc struct {
		Nftables []struct {
			Rule *struct {
				hostPortRule
				Expr json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(listing, &doc); err != nil {
		return nil, fmt.Errorf("reading nft's listing: %w", err)
	}
	var stale []hostPortRule
	for _, o := range doc.Nftables {
		if o.Rule == nil || live[o.Rule.Comment] {
			continue
		}
		r := o.Rule.hostPortRule
		var expr any
		if err := json.Unmarshal(o.Rule.Expr, &expr); err != nil {
			return nil, fmt.Errorf("reading rule %d of %s: %w", r.Handle, r.Chain, err)
		}
		r.addrs = addrsIn(expr, pods, nil)
		if len(r.addrs) > 0 {
			stale = append(stale, r)
		}
	}
	return stale, nil
}

// addrsIn collects the strings in v that are addresses in pods.
func addrsIn(v any, pods netip.Prefix, out []netip.Addr) []netip.Addr {
	switch v := v.(type) {
	case string:
		if a, err := netip.ParseAddr(v); err == nil && pods.Contains(a) {
			out = append(out, a)
		}
	case []any:
		for _, e := range v {
			out = addrsIn(e, pods, out)
		}
	case map[string]any:
		for _, e := range v {
			out = addrsIn(e, pods, out)
		}
	}
	return out
}

// hostPortRulesInto lists the portmap plugin's rules into pods that name
// no sandbox of sandboxes (staleHostPortRules), from every table it keeps.
func hostPortRulesInto(pods netip.Prefix, sandboxes []string) ([]hostPortRule, error) {
	live := map[string]bool{}
	for _, id := range sandboxes {
		live[id] = true
	}
	var rules []hostPortRule
	for _, t := range hostPortTables {
		listing, err := exec.Command("nft", "-j", "list", "table", t[0], t[1]).Output()
		if err != nil {
			continue // no such table
		}
		stale, err := staleHostPortRules(listing, pods, live)
		if err != nil {
			return nil, err
		}
		rules = append(rules, stale...)
	}
	return rules, nil
}

// removeStaleHostPorts deletes the portmap plugin's rules into pods that
// name no sandbox of sandboxes. Only one real node runs per host, so an
// address in its pod subnet is no one else's.
func removeStaleHostPorts(pods netip.Prefix, sandboxes []string) error {
	stale, err := hostPortRulesInto(pods, sandboxes)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range stale {
		if out, err := exec.Command("nft", "delete", "rule", r.Family, r.Table, r.Chain, "handle", strconv.Itoa(r.Handle)).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing a stale hostPort rule (%s %v): %w: %s", r.Chain, r.addrs, err, out))
		}
	}
	return errors.Join(errs...)
}

// HostPortRulesInto describes the portmap plugin's rules that send
// traffic to addresses in pods, as "chain: addresses (sandbox)": none
// should be left once the node that made them is down.
func HostPortRulesInto(pods netip.Prefix) ([]string, error) {
	rules, err := hostPortRulesInto(pods, nil)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = fmt.Sprintf("%s: %v (%s)", r.Chain, r.addrs, r.Comment)
	}
	return out, nil
}
