package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// serve starts the handler on loopback and returns its UDP and TCP
// addresses.
func serve(t *testing.T, r *Resolver) (udp, tcp string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs, done := make(chan [2]string, 1), make(chan error, 1)
	go func() {
		done <- Serve(ctx, "127.0.0.1:0", &Handler{Resolver: r}, func(u, t net.Addr) { addrs <- [2]string{u.String(), t.String()} })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a[0], a[1]
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return "", ""
}

// A pod's resolver (Go's own, as in Cloister's static binaries) finds a
// replica by its stable name and a Service by its short name through the
// search list, over UDP and TCP; what the zone lacks is NXDOMAIN, what is
// outside it REFUSED, and the answers are authoritative and short-lived.
func TestServeAnswersAPodsResolver(t *testing.T) {
	udp, tcp := serve(t, &Resolver{Source: testCluster()})
	for _, network := range []string{"udp", "tcp"} {
		addr := map[string]string{"udp": udp, "tcp": tcp}[network]
		res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := res.LookupHost(ctx, "vault-1.vault-internal.shop.svc.cluster.local")
		if err != nil || !slices.Equal(got, []string{"10.250.0.11"}) {
			t.Errorf("%s: a replica's name: %v %v", network, got, err)
		}
		_, err = res.LookupHost(ctx, "missing.shop.svc.cluster.local")
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s: a missing Service: %v", network, err)
		}
		cancel()
	}

	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		n     int
	}{
		{"cas.shop.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, 1},
		{"cas.shop.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, 0},
		{"vault-internal.shop.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, 2},
		{"missing.shop.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, 0},
		{"example.com.", dns.TypeA, dns.RcodeRefused, 0},
	} {
		m := new(dns.Msg)
		m.SetQuestion(tc.name, tc.qtype)
		m.RecursionDesired = true
		in, _, err := c.Exchange(m, udp)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if in.Rcode != tc.rcode || len(in.Answer) != tc.n || in.RecursionAvailable {
			t.Errorf("%s %s: %s with %d answers (recursion %v), want %s with %d", tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[in.Rcode], len(in.Answer), in.RecursionAvailable, dns.RcodeToString[tc.rcode], tc.n)
		}
		for _, rr := range in.Answer {
			if rr.Header().Ttl != TTL {
				t.Errorf("%s: TTL %d", tc.name, rr.Header().Ttl)
			}
		}
		if tc.rcode != dns.RcodeRefused && !in.Authoritative {
			t.Errorf("%s: not authoritative", tc.name)
		}
	}
	// A Service of many pods: over UDP the answer is cut and says so, over
	// TCP it is whole.
	many := testCluster()
	var eps []discoveryv1.Endpoint
	for i := range 100 {
		eps = append(eps, endpoint(fmt.Sprintf("10.250.1.%d", i), nil, ""))
	}
	many.slices["shop/cas"] = []*discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps}}
	bigUDP, bigTCP := serve(t, &Resolver{Source: many})
	q := new(dns.Msg)
	q.SetQuestion("cas.shop.svc.cluster.local.", dns.TypeA)
	if in, _, err := c.Exchange(q, bigUDP); err != nil || !in.Truncated || len(in.Answer) >= 100 {
		t.Errorf("100 addresses over UDP: %v %v", in, err)
	}
	if in, _, err := (&dns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(q, bigTCP); err != nil || in.Truncated || len(in.Answer) != 100 {
		t.Errorf("100 addresses over TCP: %v", err)
	}

	// Two questions in one message: refused (by the library's message
	// check), not half-answered.
	m := new(dns.Msg)
	m.SetQuestion("cas.shop.svc.cluster.local.", dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	if in, _, err := c.Exchange(m, udp); err != nil || in.Rcode == dns.RcodeSuccess || len(in.Answer) != 0 {
		t.Errorf("two questions: %v %v", in, err)
	}
}

// The listen address is taken: Serve says so and returns.
func TestServeAddressTaken(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	err = Serve(context.Background(), l.LocalAddr().String(), &Handler{Resolver: &Resolver{Source: testCluster()}}, nil)
	if err == nil {
		t.Fatal("served on a taken address")
	}
}
