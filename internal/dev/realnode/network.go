package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
)

// Network is the real node's pod network: a Linux bridge that carries the
// node's address (the kubelet listens there, the API server reaches it
// there) and the address of the cluster's `kubernetes` Service, where the
// node's API server proxy listens: without kube-proxy, that is how pods
// reach the API server, which itself stays bound to 127.0.0.1. Pods talk to
// the node and to each other, not to the outside; the only netfilter rules
// are the portmap plugin's hostPorts (nftables, removed with the node).
type Network struct {
	// Bridge is the interface name (at most 15 bytes).
	Bridge string
	// Node is the node's address and the pod subnet, e.g. 10.250.0.1/24.
	Node netip.Prefix
	// Service is the `kubernetes` Service's cluster IP.
	Service netip.Addr
}

// DefaultNetwork is the dev cluster's address plan's: clear of the
// simulated nodes' addresses and pods and of the Service range.
var DefaultNetwork = Network{
	Bridge:  netplan.Bridge,
	Node:    netplan.RealNode,
	Service: netplan.KubernetesService(),
}

// NodeIP is the node's InternalIP.
func (n Network) NodeIP() netip.Addr { return n.Node.Addr() }

// PodCIDR is the node's pod subnet.
func (n Network) PodCIDR() netip.Prefix { return n.Node.Masked() }

// Validate checks the addresses make sense together.
func (n Network) Validate() error {
	switch {
	case n.Bridge == "" || len(n.Bridge) > 15:
		return fmt.Errorf("bridge name %q: use 1 to 15 bytes", n.Bridge)
	case !n.Node.IsValid() || !n.Node.Addr().Is4() || n.Node.Bits() > 28:
		return fmt.Errorf("node address %s: use an IPv4 address with a prefix of /28 or wider", n.Node)
	case n.Node.Addr() == n.Node.Masked().Addr():
		return fmt.Errorf("node address %s is the subnet's network address; use a host address such as .1", n.Node)
	case !n.Service.Is4() || n.PodCIDR().Contains(n.Service):
		return fmt.Errorf("service address %s: use an IPv4 address outside the pod subnet %s", n.Service, n.PodCIDR())
	}
	return nil
}

// Up creates the bridge with both addresses, or completes one left by an
// earlier run.
func (n Network) Up() error {
	if err := n.Validate(); err != nil {
		return err
	}
	link, err := netlink.LinkByName(n.Bridge)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.Bridge}}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("creating bridge %s: %w", n.Bridge, err)
		}
		if link, err = netlink.LinkByName(n.Bridge); err != nil {
			return fmt.Errorf("finding bridge %s: %w", n.Bridge, err)
		}
	case err != nil:
		return fmt.Errorf("finding bridge %s: %w", n.Bridge, err)
	case link.Type() != "bridge":
		return fmt.Errorf("interface %s exists and is a %s, not the real node's bridge; remove it or choose another name", n.Bridge, link.Type())
	}
	for _, p := range []netip.Prefix{n.Node, netip.PrefixFrom(n.Service, 32)} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("adding %s to %s: %w", p, n.Bridge, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", n.Bridge, err)
	}
	return nil
}

// Down deletes the bridge (and so its addresses and routes); an absent
// bridge is not an error. The pods' veth ends went with their network
// namespaces.
func (n Network) Down() error {
	link, err := netlink.LinkByName(n.Bridge)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", n.Bridge, err)
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("interface %s is a %s, not the real node's bridge; left alone", n.Bridge, link.Type())
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("deleting bridge %s: %w", n.Bridge, err)
	}
	return nil
}

// Exists reports whether the bridge is there.
func (n Network) Exists() bool {
	_, err := netlink.LinkByName(n.Bridge)
	return err == nil
}

// CNIConfig is the conflist containerd hands to the CNI plugins: the
// bridge plugin attaches pods to the bridge (gateway: the node address),
// host-local hands out the pod subnet with its state in ipamDir, portmap
// serves hostPorts.
// containerd runs the loopback plugin itself, for every pod.
func (n Network) CNIConfig(ipamDir string) []byte {
	type ipRange struct {
		Subnet  string `json:"subnet"`
		Gateway string `json:"gateway"`
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetwork,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      n.Bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": ipamDir,
					"ranges":  [][]ipRange{{{Subnet: n.PodCIDR().String(), Gateway: n.NodeIP().String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			// hostPorts (LAS at status.hostIP:18766): DNAT from the node's
			// addresses, and masquerading for a pod reaching itself or the
			// host reaching localhost. The bridge passes pod-to-pod traffic
			// through netfilter (br_netfilter), so replies are un-NATed.
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
				"backend":      "nftables",
				"snat":         true,
			},
		},
	}
	data, _ := json.MarshalIndent(conf, "", "  ")
	return data
}

// cniNetwork names the node's CNI network (and its cached results).
const cniNetwork = "cloister"
