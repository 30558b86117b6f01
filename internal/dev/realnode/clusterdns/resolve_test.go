package clusterdns

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// cluster is a Source of fixed objects.
type cluster struct {
	services map[string]*corev1.Service
	slices   map[string][]*discoveryv1.EndpointSlice
	err      error
}

func (c *cluster) Service(ns, name string) (*corev1.Service, error) {
	if c.err != nil {
		return nil, c.err
	}
	if s, ok := c.services[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, ErrNotFound
}

func (c *cluster) EndpointSlices(ns, svc string) ([]*discoveryv1.EndpointSlice, error) {
	return c.slices[ns+"/"+svc], nil
}

func endpoint(ip string, ready *bool, host string) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if host != "" {
		ep.Hostname = ptr.To(host)
	}
	return ep
}

// testCluster: a ClusterIP Service (cas) with a ready and a not-ready
// pod, a headless one of a StatefulSet (vault-internal) with hostnames,
// the kubernetes Service, and an IPv6 slice that is never answered.
func testCluster() *cluster {
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}}}
	}
	return &cluster{
		services: map[string]*corev1.Service{
			"shop/cas":            svc("shop", "cas", "10.96.0.20"),
			"shop/vault-internal": svc("shop", "vault-internal", corev1.ClusterIPNone),
			"default/kubernetes":  svc("default", "kubernetes", "10.96.0.1"),
			"shop/empty":          svc("shop", "empty", "10.96.0.21"),
		},
		slices: map[string][]*discoveryv1.EndpointSlice{
			"shop/cas": {
				{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
					endpoint("10.250.0.7", ptr.To(true), ""), endpoint("10.250.0.8", ptr.To(false), ""), endpoint("10.250.0.7", nil, ""),
				}},
				{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{endpoint("fd00::7", nil, "")}},
			},
			"shop/vault-internal": {
				{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
					endpoint("10.250.0.10", ptr.To(true), "vault-0"), endpoint("10.250.0.11", nil, "vault-1"), endpoint("10.250.0.12", ptr.To(false), "vault-2"),
				}},
			},
			"default/kubernetes": {
				{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{endpoint("127.0.0.1", ptr.To(true), "")}},
			},
		},
	}
}

func TestResolve(t *testing.T) {
	r := &Resolver{Source: testCluster(), Served: []netip.Addr{netip.MustParseAddr("10.96.0.1")}}
	for _, tc := range []struct {
		name    string
		outcome Outcome
		addrs   []string
	}{
		// Without kube-proxy: the ready pods, once each.
		{"cas.shop.svc.cluster.local.", Found, []string{"10.250.0.7"}},
		{"CAS.Shop.SVC.cluster.local", Found, []string{"10.250.0.7"}},
		{"vault-internal.shop.svc.cluster.local.", Found, []string{"10.250.0.10", "10.250.0.11"}},
		{"vault-1.vault-internal.shop.svc.cluster.local.", Found, []string{"10.250.0.11"}},
		// Not ready: not published (a Service that publishes them marks them ready).
		{"vault-2.vault-internal.shop.svc.cluster.local.", NoSuchName, nil},
		{"vault-9.vault-internal.shop.svc.cluster.local.", NoSuchName, nil},
		// The node serves this cluster IP itself.
		{"kubernetes.default.svc.cluster.local.", Found, []string{"10.96.0.1"}},
		// Exists, no ready pods: NODATA, not NXDOMAIN.
		{"empty.shop.svc.cluster.local.", Found, nil},
		{"missing.shop.svc.cluster.local.", NoSuchName, nil},
		{"shop.svc.cluster.local.", NoSuchName, nil},
		{"a.b.cas.shop.svc.cluster.local.", NoSuchName, nil},
		{"10-250-0-7.shop.pod.cluster.local.", NoSuchName, nil},
		{"cluster.local.", NoSuchName, nil},
		// Search-list expansions of a short name fall through to the next.
		{"cas.shop.svc.shop.svc.cluster.local.", NoSuchName, nil},
		// Nothing else is answered, nor forwarded.
		{"example.com.", NotOurs, nil},
		{"cas.shop.svc.", NotOurs, nil},
		{"evilcluster.local.", NotOurs, nil},
		{"", NotOurs, nil},
	} {
		outcome, addrs, err := r.Resolve(tc.name)
		var got []string
		for _, a := range addrs {
			got = append(got, a.String())
		}
		if err != nil || outcome != tc.outcome || !slices.Equal(got, tc.addrs) {
			t.Errorf("%q: %v %v %v, want %v %v", tc.name, outcome, got, err, tc.outcome, tc.addrs)
		}
	}
	// Another domain.
	r.Domain = "dev.internal."
	if outcome, _, _ := r.Resolve("cas.shop.svc.cluster.local."); outcome != NotOurs {
		t.Errorf("another domain answers cluster.local: %v", outcome)
	}
	if outcome, addrs, _ := r.Resolve("cas.shop.svc.dev.internal."); outcome != Found || len(addrs) != 1 {
		t.Errorf("cas in dev.internal: %v %v", outcome, addrs)
	}
	// The source's failure is returned, not taken for a missing name.
	broken := &Resolver{Source: &cluster{err: errors.New("cache not synced")}}
	if _, _, err := broken.Resolve("cas.shop.svc.cluster.local."); err == nil {
		t.Error("a source error was not returned")
	}
}

func FuzzResolve(f *testing.F) {
	for _, s := range []string{"cas.shop.svc.cluster.local.", "vault-1.vault-internal.shop.svc.cluster.local", "..svc.cluster.local", "example.com."} {
		f.Add(s)
	}
	r := &Resolver{Source: testCluster()}
	f.Fuzz(func(t *testing.T, name string) {
		outcome, addrs, err := r.Resolve(name)
		if err != nil || (outcome != Found && len(addrs) > 0) {
			t.Fatalf("%q: %v %v %v", name, outcome, addrs, err)
		}
		for _, a := range addrs {
			if !a.Is4() {
				t.Fatalf("%q: %v", name, a)
			}
		}
	})
}
