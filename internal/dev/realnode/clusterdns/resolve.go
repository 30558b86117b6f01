// Package clusterdns is the dev cluster's DNS for its real node: pods there
// find Services, and a StatefulSet's pods by their stable names, by the
// names Kubernetes' DNS specification gives them, answered from the API
// server's Services and EndpointSlices. It answers the cluster's zone only
// and forwards nothing, so no lookup leaves the machine.
//
// Without kube-proxy nothing routes a Service's cluster IP, so a Service
// of selected pods resolves to its ready pods' addresses, as a headless
// Service does; a cluster IP the node serves itself (the `kubernetes`
// Service's) resolves to that address.
package clusterdns

import (
	"errors"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Source is what answers are made of: a Service, and the EndpointSlices of
// a Service.
type Source interface {
	Service(namespace, name string) (*corev1.Service, error)
	EndpointSlices(namespace, service string) ([]*discoveryv1.EndpointSlice, error)
}

// ErrNotFound is the Source's answer for a Service that does not exist.
var ErrNotFound = errors.New("not found")

// Outcome is how a name resolves.
type Outcome int

const (
	// Found: the name exists; Addrs may be empty (no ready pods).
	Found Outcome = iota
	// NoSuchName: the name is in the zone and does not exist.
	NoSuchName
	// NotOurs: the name is outside the zone; nothing is forwarded.
	NotOurs
)

// Resolver answers the names under Domain (cluster.local by default).
type Resolver struct {
	Domain string
	Source Source
	// Served are cluster IPs the node answers at itself.
	Served []netip.Addr
}

// Resolve returns the IPv4 addresses of name (case-insensitive, with or
// without the final dot). A Source error other than ErrNotFound is
// returned as is (the caller answers SERVFAIL).
func (r *Resolver) Resolve(name string) (Outcome, []netip.Addr, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	domain := strings.ToLower(strings.Trim(r.Domain, "."))
	if domain == "" {
		domain = "cluster.local"
	}
	if name != domain && !strings.HasSuffix(name, "."+domain) {
		return NotOurs, nil, nil
	}
	rest, ok := strings.CutSuffix(name, ".svc."+domain)
	if !ok {
		return NoSuchName, nil, nil
	}
	labels := strings.Split(rest, ".")
	var host, svc, ns string
	switch len(labels) {
	case 2:
		svc, ns = labels[0], labels[1]
	case 3:
		host, svc, ns = labels[0], labels[1], labels[2]
	default:
		return NoSuchName, nil, nil
	}
	s, err := r.Source.Service(ns, svc)
	if errors.Is(err, ErrNotFound) {
		return NoSuchName, nil, nil
	}
	if err != nil {
		return Found, nil, err
	}
	if host == "" {
		for _, ip := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil && r.served(a) {
				return Found, []netip.Addr{a}, nil
			}
		}
	}
	slices, err := r.Source.EndpointSlices(ns, svc)
	if err != nil {
		return Found, nil, err
	}
	addrs := endpoints(slices, host)
	if host != "" && len(addrs) == 0 {
		return NoSuchName, nil, nil
	}
	return Found, addrs, nil
}

func (r *Resolver) served(a netip.Addr) bool {
	for _, s := range r.Served {
		if s == a {
			return true
		}
	}
	return false
}

// endpoints are the ready IPv4 addresses of the slices, of the endpoint
// named host only when host is given. A Service that publishes pods not
// ready yet has them marked ready in its slices.
func endpoints(slices []*discoveryv1.EndpointSlice, host string) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if host != "" && (ep.Hostname == nil || strings.ToLower(*ep.Hostname) != host) {
				continue
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || !ip.Is4() || seen[ip] {
					continue
				}
				seen[ip] = true
				out = append(out, ip)
			}
		}
	}
	return out
}
