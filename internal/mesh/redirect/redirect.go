// Package redirect owns the service mesh's redirect: the nftables
// rules, set through netlink in a confidential pod's own network
// namespace, that send the pod's inbound TCP connections to the ingress
// proxy, except on the ports that stay plain. The rules hook prerouting
// only: what the pod sends itself (the proxy's connections to the app on
// loopback among them) never passes there, so nothing loops and no user
// needs exempting. They live and die with the pod's namespace, so a
// deleted pod leaves nothing behind on its node.
package redirect

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Table is the nftables table of the redirect (family inet: IPv4 and IPv6).
const Table = "cloister-mesh"

const chain = "ingress"

// Rules are the redirect of one pod.
type Rules struct {
	// ProxyPort is where the ingress proxy listens.
	ProxyPort uint16
	// Exclude are the ports that stay plain: those the ingress annotation
	// lists with disableTLS true, and the proxy's admin port.
	Exclude []uint16
}

func (r Rules) table() *nftables.Table {
	return &nftables.Table{Name: Table, Family: nftables.TableFamilyINet}
}

// Exprs are the rules' expressions, in order:
//
//	iifname "lo" return
//	tcp dport P return          (one per excluded port)
//	meta l4proto tcp redirect to :ProxyPort
func (r Rules) Exprs() [][]expr.Any {
	out := [][]expr.Any{{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}}
	exclude := slices.Clone(r.Exclude)
	slices.Sort(exclude)
	for _, p := range slices.Compact(exclude) {
		out = append(out, append(isTCP(),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(p)},
			&expr.Verdict{Kind: expr.VerdictReturn},
		))
	}
	return append(out, append(isTCP(),
		&expr.Immediate{Register: 1, Data: port(r.ProxyPort)},
		// As the kernel reads it back: one port, given.
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	))
}

func isTCP() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

func port(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }

// ifname is an interface name as the kernel compares it (IFNAMSIZ bytes).
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// Apply replaces the redirect in the namespace of conn in one
// transaction: applied twice, the rules are there once.
func Apply(conn *nftables.Conn, r Rules) error {
	if r.ProxyPort == 0 {
		return fmt.Errorf("the redirect needs the proxy's port")
	}
	t := r.table()
	// Adding first makes the delete succeed when there is no table yet.
	conn.AddTable(t)
	conn.DelTable(t)
	conn.AddTable(t)
	c := conn.AddChain(&nftables.Chain{Name: chain, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	for _, e := range r.Exprs() {
		conn.AddRule(&nftables.Rule{Table: t, Chain: c, Exprs: e})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("setting the mesh redirect (nftables table inet %s): %w", Table, err)
	}
	return nil
}

// Remove deletes the redirect, if there is one.
func Remove(conn *nftables.Conn) error {
	t := (Rules{}).table()
	conn.AddTable(t)
	conn.DelTable(t)
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("removing the mesh redirect (nftables table inet %s): %w", Table, err)
	}
	return nil
}

// Present says whether the namespace of conn has the redirect's table.
func Present(conn *nftables.Conn) (bool, error) {
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == Table }), nil
}

// Read returns the rules' expressions in the namespace of conn.
func Read(conn *nftables.Conn) ([][]expr.Any, error) {
	t := (Rules{}).table()
	rules, err := conn.GetRules(t, &nftables.Chain{Name: chain, Table: t})
	if err != nil {
		return nil, err
	}
	out := make([][]expr.Any, len(rules))
	for i, r := range rules {
		out[i] = r.Exprs
	}
	return out, nil
}
