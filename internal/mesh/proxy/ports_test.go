package proxy

import (
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
		r, err := p.route(c.port)
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
