package realnode

import (
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// A listing as nft -j prints the portmap plugin's table: LAS's hostPort
// twice, for a pod of an earlier node (864b) and for one of this node.
const hostPortListing = `{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
{"table": {"family": "ip", "name": "cni_hostport", "handle": 1}},
{"chain": {"family": "ip", "table": "cni_hostport", "name": "hostports", "handle": 1}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "hostports", "handle": 3, "comment": "864b", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 18766}}, {"dnat": {"addr": "10.250.0.5", "port": 18766}}]}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "hostports", "handle": 4, "comment": "ff98", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 18766}}, {"dnat": {"addr": "10.250.0.15", "port": 18766}}]}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "masquerading", "handle": 5, "comment": "864b", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "127.0.0.1"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.250.0.5"}}, {"masquerade": null}]}}]}`

func TestStaleHostPortRules(t *testing.T) {
	pods := netip.MustParsePrefix("10.250.0.0/24")
	for _, tc := range []struct {
		name    string
		listing string
		pods    netip.Prefix
		live    []string
		want    []int
		wantErr string
	}{
		{name: "an earlier node's pod", listing: hostPortListing, pods: pods, live: []string{"ff98"}, want: []int{3, 5}},
		{name: "no sandbox yet", listing: hostPortListing, pods: pods, want: []int{3, 4, 5}},
		{name: "every sandbox live", listing: hostPortListing, pods: pods, live: []string{"864b", "ff98"}},
		{name: "another subnet's pods", listing: hostPortListing, pods: netip.MustParsePrefix("10.88.0.0/16")},
		{name: "not nft's JSON", listing: "table ip cni_hostport {", pods: pods, wantErr: "reading nft's listing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := map[string]bool{}
			for _, id := range tc.live {
				live[id] = true
			}
			stale, err := staleHostPortRules([]byte(tc.listing), tc.pods, live)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var handles []int
			for _, r := range stale {
				handles = append(handles, r.Handle)
			}
			if !slices.Equal(handles, tc.want) {
				t.Errorf("stale rules %v, want %v", handles, tc.want)
			}
		})
	}
}

// In a network namespace of the test's own: the rules of a pod no
// sandbox holds go, this node's and another CNI user's stay.
func TestRemoveStaleHostPorts(t *testing.T) {
	ns := testenv.NetNS(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testskip.Skipf(t, "%v", ErrNoNft)
	}
	nft := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nft", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var listing string
	testenv.InNetNS(t, ns, func() {
		nft("add", "table", "ip", "cni_hostport")
		nft("add", "chain", "ip", "cni_hostport", "hostports")
		nft("add", "rule", "ip", "cni_hostport", "hostports", "tcp", "dport", "18766", "dnat", "to", "10.250.0.5:18766", "comment", `"gone"`)
		nft("add", "rule", "ip", "cni_hostport", "hostports", "tcp", "dport", "18766", "dnat", "to", "10.250.0.15:18766", "comment", `"live"`)
		nft("add", "rule", "ip", "cni_hostport", "hostports", "tcp", "dport", "8080", "dnat", "to", "10.88.0.2:80", "comment", `"someone-else"`)
		if err := removeStaleHostPorts(netip.MustParsePrefix("10.250.0.0/24"), []string{"live"}); err != nil {
			t.Fatal(err)
		}
		listing = nft("list", "table", "ip", "cni_hostport")
	})
	for _, want := range []string{"10.250.0.15:18766", "10.88.0.2:80"} {
		if !strings.Contains(listing, want) {
			t.Errorf("the rule to %s went:\n%s", want, listing)
		}
	}
	if strings.Contains(listing, "10.250.0.5") {
		t.Errorf("the stale rule stayed:\n%s", listing)
	}
}
