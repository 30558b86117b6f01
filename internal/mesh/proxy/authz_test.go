package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
)

// dialIngress is a caller presenting cert to the ingress at addr: whether
// its bytes came back from the app.
func dialIngress(t *testing.T, addr string, ca *meshtest.CA, cert tls.Certificate) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "api", MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_, err = roundTrip(conn, "hello")
	return err
}

// The ingress admits callers by mesh identity, as the service's policy
// says: its own policy's workloads by default, another policy's only when
// listed; never a certificate of another CA, nor one of the mesh CA that
// names no workload. Each refusal is logged with the caller it refused.
func TestIngressAuthorizesCallers(t *testing.T) {
	ca := meshtest.NewCA(t)
	dir := t.TempDir()
	ca.WriteAs(t, dir, "api", "shop", wire.MeshAuthz{Allow: []string{"shop/*", "billing/invoice"}, Upstreams: []string{"shop/*"}})
	logs := &testenv.Buffer{}
	p := &Proxy{Log: slog.New(slog.NewTextHandler(logs, nil))}
	ingress := start(t, func(ctx context.Context, ln net.Listener) error {
		return p.Ingress(ctx, ln, Fixed(echo(t), (&Certs{Dir: dir}).ServerConfig(true)))
	})
	for _, tc := range []struct {
		what string
		cert tls.Certificate
		ok   bool
		log  string
	}{
		{"a service of its own policy", ca.IssueAs(t, "web", "shop"), true, ""},
		{"a listed service of another policy", ca.IssueAs(t, "invoice", "billing"), true, ""},
		{"an unlisted service of that policy", ca.IssueAs(t, "report", "billing"), false, "caller spiffe://test.cloister/policy/billing/service/report is not among the callers"},
		{"another policy's workload", ca.IssueAs(t, "web", "ledger"), false, "policy/ledger/service/web is not among the callers"},
		{"a certificate of another CA", meshtest.NewCA(t).IssueAs(t, "web", "shop"), false, "signed by unknown authority"},
	} {
		err := dialIngress(t, ingress, ca, tc.cert)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want admitted %v", tc.what, err, tc.ok)
		}
		if tc.log != "" && !logged(logs, tc.log) {
			t.Errorf("%s: the log does not say why:\n%s", tc.what, logs)
		}
	}
}

// The egress connects only to an upstream that is a workload the
// service's policy lists (by default its own policy's), whatever name
// its certificate carries.
func TestEgressChecksTheUpstreamsIdentity(t *testing.T) {
	ca := meshtest.NewCA(t)
	webDir := t.TempDir()
	ca.WriteAs(t, webDir, "web", "shop", wire.MeshAuthz{Allow: []string{"shop/*"}, Upstreams: []string{"shop/*"}})
	upstream := func(policy string) string {
		dir := t.TempDir()
		// Its DNS name is what the egress asks for; only its identity differs.
		ca.WriteAs(t, dir, "api", policy, wire.MeshAuthz{Allow: []string{"shop/*"}, Upstreams: []string{policy + "/*"}})
		return start(t, func(ctx context.Context, ln net.Listener) error {
			return (&Proxy{Log: slog.New(slog.DiscardHandler)}).Ingress(ctx, ln, Fixed(echo(t), (&Certs{Dir: dir}).ServerConfig(true)))
		})
	}
	logs := &testenv.Buffer{}
	for _, tc := range []struct {
		policy string
		ok     bool
	}{{"shop", true}, {"ledger", false}} {
		up := upstream(tc.policy)
		egress := start(t, func(ctx context.Context, ln net.Listener) error {
			return (&Proxy{Log: slog.New(slog.NewTextHandler(logs, nil))}).Egress(ctx, ln, net.JoinHostPort("127.0.0.1", portOf(up)), &Certs{Dir: webDir})
		})
		conn, err := net.Dial("tcp", egress)
		if err != nil {
			t.Fatal(err)
		}
		got, err := roundTrip(conn, "hello")
		_ = conn.Close()
		if (err == nil && got == "hello") != tc.ok {
			t.Errorf("an upstream of policy %s: %q, %v, want reached %v", tc.policy, got, err, tc.ok)
		}
	}
	if !logged(logs, "upstream spiffe://test.cloister/policy/ledger/service/api is not among the workloads") {
		t.Errorf("the egress does not say why:\n%s", logs)
	}
}

// logged waits a little for the proxy to log want: it logs after the
// caller has seen the refusal.
func logged(logs *testenv.Buffer, want string) bool {
	for range 100 {
		if strings.Contains(logs.String(), want) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
