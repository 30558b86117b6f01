package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/cloister-cc/cloister/internal/mesh/annotation"
)

// Each port as the ingress annotation says: listed with disableTLS false,
// TLS alone; with true, plain; unlisted, mTLS; the proxy's own, refused.
func TestPortsRoute(t *testing.T) {
	cfg, err := annotation.ParseIngress("main#8001#false##metrics#8080#true")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPorts(cfg, &Certs{Dir: t.TempDir()}, 15006, 15000)
	for _, c := range []struct {
		port   uint16
		want   string // mtls, tls, plain, refused
		target string
	}{
		{8001, "tls", "127.0.0.1:8001"},
		{8080, "plain", "127.0.0.1:8080"},
		{9000, "mtls", "127.0.0.1:9000"},
		{15006, "refused", ""},
		{15000, "refused", ""},
	} {
		r, err := p.route(netip.AddrPortFrom(netip.MustParseAddr("10.0.0.7"), c.port))
		got := "refused"
		switch {
		case err != nil:
		case r.TLS == nil:
			got = "plain"
		case r.TLS == p.mutual:
			got = "mtls"
		case r.TLS == p.server:
			got = "tls"
		}
		if got != c.want || r.Target != c.target {
			t.Errorf("port %d: %s to %q, want %s to %q", c.port, got, r.Target, c.want, c.target)
		}
	}
}

// An app that listens only on the pod's address is reached there: the
// connection's original destination, when loopback refuses.
func TestAppOnThePodsAddress(t *testing.T) {
	// 127.0.0.2 stands in for the pod's address: local, not 127.0.0.1.
	app, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Close() }()
	go func() {
		c, err := app.Accept()
		if err == nil {
			_, _ = c.Write([]byte("app"))
			_ = c.Close()
		}
	}()
	cfg, _ := annotation.ParseIngress("")
	p := NewPorts(cfg, &Certs{Dir: t.TempDir()})
	dst := netip.MustParseAddrPort(app.Addr().String())
	r, err := p.route(dst)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Dial(context.Background(), "tcp", r.Target)
	if err != nil {
		t.Fatalf("the app on the pod's address: %v", err)
	}
	defer func() { _ = c.Close() }()
	if got, _ := io.ReadAll(c); string(got) != "app" {
		t.Errorf("read %q", got)
	}
	// Nothing listens on loopback's or the pod's address: refused.
	_ = app.Close()
	if c, err := r.Dial(context.Background(), "tcp", r.Target); err == nil {
		_ = c.Close()
		t.Error("a closed app answered")
	}
}
