package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/server/egressselector"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{in: "10.250.0.7:10250", want: "10.250.0.7:10250"},
		{in: "[::1]:443", want: "[::1]:443"},
		{in: "localhost:9443", want: "127.0.0.1:9443"},
		{in: "[::ffff:127.0.0.1]:80", want: "127.0.0.1:80"},
		{in: "kubernetes.default.svc:443", err: "resolves no names"},
		{in: "[fe80::1%eth0]:443", err: "not an IP address"},
		{in: "10.0.0.1", err: "use ADDRESS:PORT"},
		{in: "10.0.0.1:0", err: "not a port number"},
		{in: "10.0.0.1:65536", err: "not a port number"},
		{in: strings.Repeat("a", 300) + ":1", err: "at most 256"},
	} {
		got, err := ParseTarget(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v %v, want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("%q: %v %v, want %s", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"10.250.0.7:10250", "[::1]:443", "localhost:1", "a:b:c", "[::1%lo]:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		attesttest.CountExec()
		ap, err := ParseTarget(s)
		if err != nil {
			return
		}
		// What is checked is what is dialled: an address, never a name.
		again, err := ParseTarget(ap.String())
		if err != nil || again != ap || ap.Port() == 0 || ap.Addr().Zone() != "" {
			t.Fatalf("%q parsed as %v, which reads back as %v %v", s, ap, again, err)
		}
	})
}

func TestJudge(t *testing.T) {
	noRoute := errors.New("no route to host")
	for _, tt := range []struct {
		addr  string
		route Route
		err   error
		says  string // "" allowed
	}{
		{addr: "127.0.0.1"},
		{addr: "::1"},
		{addr: "192.0.2.2", route: Route{Local: true, Dev: "eth0"}},
		{addr: "10.250.0.1", route: Route{Local: true, Dev: "cloister0"}},
		{addr: "10.250.0.7", route: Route{Dev: "cloister0"}},
		{addr: "10.250.0.7", route: Route{Dev: "eth0", Gw: true}, says: "real node's network, which is not up"},
		{addr: "10.250.0.7", route: Route{Dev: "cloister0", Gw: true}, says: "real node's network"},
		{addr: "10.128.0.1", err: noRoute, says: "simulated node's address: nothing runs there"},
		{addr: "10.128.0.1", route: Route{Dev: "eth0", Gw: true}, says: "simulated node's address"},
		{addr: "10.64.0.1", route: Route{Dev: "eth0", Gw: true}, says: "simulated node's address"},
		{addr: "10.251.0.10", err: noRoute, says: "Service address"},
		{addr: "192.0.2.77", route: Route{Dev: "eth0"}, says: "not on this machine"},
		{addr: "8.8.8.8", route: Route{Dev: "eth0", Gw: true}, says: "not on this machine"},
	} {
		err := Judge(netip.MustParseAddr(tt.addr), tt.route, tt.err)
		if tt.says == "" && err != nil || tt.says != "" && (err == nil || !strings.Contains(err.Error(), tt.says)) {
			t.Errorf("%s via %+v (%v): %v, want %q", tt.addr, tt.route, tt.err, err, tt.says)
		}
	}
}

// serveProxy serves p on a unix socket until the test ends, and returns
// the socket.
func serveProxy(tb testing.TB, p *Proxy) string {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), "egress.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, l) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			tb.Error(err)
		}
	})
	return sock
}

// apiServerDialer is the API server's own egress dialer for "cluster"
// traffic, configured as the dev cluster configures it.
func apiServerDialer(tb testing.TB, sock string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	tb.Helper()
	sel, err := egressselector.NewEgressSelector(&apiserver.EgressSelectorConfiguration{EgressSelections: []apiserver.EgressSelection{{
		Name: "cluster",
		Connection: apiserver.Connection{ProxyProtocol: apiserver.ProtocolHTTPConnect,
			Transport: &apiserver.Transport{UDS: &apiserver.UDSTransport{UDSName: sock}}},
	}}})
	if err != nil {
		tb.Fatal(err)
	}
	dial, err := sel.Lookup(egressselector.Cluster.AsNetworkContext())
	if err != nil {
		tb.Fatal(err)
	}
	return dial
}

// echoServer echoes on a loopback port until the test ends; its address.
func echoServer(tb testing.TB) string {
	tb.Helper()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = echo.Close() // a network peer may have closed first
	})
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer func() { _ = c.Close() }(); _, _ = io.Copy(c, c) }()
		}
	}()
	return echo.Addr().String()
}

// TestProxyForTheAPIServer drives the proxy with the API server's own
// egress dialer, configured as the dev cluster configures it.
func TestProxyForTheAPIServer(t *testing.T) {
	ctx := context.Background()
	// Should the proxy let a refused destination through, the test must
	// not send the packet: only loopback is ever dialled.
	dial := apiServerDialer(t, serveProxy(t, &Proxy{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
			t.Errorf("the proxy dialled %s", addr)
			return nil, errors.New("not dialled by the test")
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}}))
	echo := echoServer(t)
	c, err := dial(ctx, "tcp", echo)
	if err != nil {
		t.Fatalf("a loopback destination: %v", err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("through the tunnel: %q %v", buf, err)
	}
	_ = c.Close() // a network peer may have closed first

	// Refused before anything is dialled: no packet leaves for these.
	for target, says := range map[string]string{
		"10.128.0.1:9443": "10.128.0.1 is a simulated node's address: nothing runs there",
		"10.64.0.2:10250": "simulated node's address",
		"10.251.7.7:443":  "Service address",
		"192.0.2.77:443":  "192.0.2.77 is not on this machine",
		"example.com:443": "resolves no names",
	} {
		c, err := dial(ctx, "tcp", target)
		if err == nil {
			_ = c.Close() // a network peer may have closed first
			t.Errorf("%s: dialled, want a refusal", target)
			continue
		}
		if !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want the reason %q in the API server's error", target, err, says)
		}
	}
}

// BenchmarkConnect is one tunnel through the proxy to a loopback listener,
// as the API server opens one per webhook call or kubelet request.
func BenchmarkConnect(b *testing.B) {
	dial := apiServerDialer(b, serveProxy(b, &Proxy{}))
	echo := echoServer(b)
	ctx := context.Background()
	buf := make([]byte, 1)
	b.ResetTimer()
	for b.Loop() {
		c, err := dial(ctx, "tcp", echo)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		_ = c.Close() // a network peer may have closed first
	}
}
