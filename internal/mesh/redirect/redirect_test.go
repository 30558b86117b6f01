package redirect_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
	"github.com/cloister-cc/cloister/internal/mesh/redirect"
)

// in runs f with the calling thread in ns.
func in(t *testing.T, ns netns.NsHandle, f func()) { testenv.InNetNS(t, ns, f) }

// pair is a pod's network namespace and a neighbour's, joined by a veth
// pair: pod 10.213.0.1, neighbour 10.213.0.2.
func pair(t *testing.T) (pod, neighbour netns.NsHandle) {
	t.Helper()
	pod, neighbour = testenv.NetNS(t), testenv.NetNS(t)
	h, err := netlink.NewHandleAt(pod)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
		t.Fatal(err)
	}
	peer, err := h.LinkByName("peer0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetNsFd(peer, int(neighbour)); err != nil {
		t.Fatal(err)
	}
	up := func(ns netns.NsHandle, link, addr string) {
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		for _, name := range []string{"lo", link} {
			l, err := h.LinkByName(name)
			if err == nil {
				err = h.LinkSetUp(l)
			}
			if err == nil && name == link {
				a, _ := netlink.ParseAddr(addr)
				err = h.AddrAdd(l, a)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	up(pod, "eth0", "10.213.0.1/24")
	up(neighbour, "peer0", "10.213.0.2/24")
	return pod, neighbour
}

func listen(t *testing.T, ns netns.NsHandle, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	in(t, ns, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = ln.Close() }) // the test may have closed it
	return ln
}

// echoOn serves ln, answering each connection with its port and the
// first two bytes it read.
func echoOn(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, port, _ := net.SplitHostPort(c.LocalAddr().String())
				buf := make([]byte, 2)
				n, _ := c.Read(buf)
				_, _ = c.Write([]byte(port + ":" + string(buf[:n])))
			}()
		}
	}()
}

const (
	proxyPort = 15006
	adminPort = 15000
)

// Contrast's documented mesh example in a real pair of network namespaces: the pod's
// nftables redirect sends its inbound connections to the ingress proxy,
// which finds the port each was sent to (conntrack's original
// destination) and treats it as the annotation says.
func TestRedirectToIngress(t *testing.T) {
	pod, neighbour := pair(t)
	nft, err := nftables.New(nftables.WithNetNSFd(int(pod)))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := annotation.ParseIngress("main#8001#false##metrics#8080#true")
	if err != nil {
		t.Fatal(err)
	}
	rules := redirect.Rules{ProxyPort: proxyPort, Exclude: append(cfg.PlainPorts(), adminPort)}
	// Twice: the second replaces the first.
	for range 2 {
		if err := redirect.Apply(nft, rules); err != nil {
			t.Fatal(err)
		}
	}
	got, err := redirect.Read(nft)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rules.Exprs(), got); diff != "" {
		t.Errorf("the rules read back (-want +got):\n%s", diff)
	}
	host, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	if present, err := redirect.Present(host); err != nil || present {
		t.Errorf("the host's namespace has the pod's table: %v %v", present, err)
	}

	// The app listens on every address; the proxy on its port.
	for _, p := range []string{"8001", "8080", "9000"} {
		echoOn(listen(t, pod, "0.0.0.0:"+p))
	}
	echoOn(listen(t, pod, "0.0.0.0:15000"))
	ca := meshtest.NewCA(t)
	podDir, clientDir := t.TempDir(), t.TempDir()
	ca.Write(t, podDir, "main.default")
	ca.Write(t, clientDir, "client.default")
	logs := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	ports := proxy.NewPorts(cfg, &proxy.Certs{Dir: podDir}, proxyPort, adminPort)
	// The proxy runs in the pod's namespace, as in a pod.
	ports.Dial = func(ctx context.Context, network, address string) (conn net.Conn, err error) {
		in(t, pod, func() { conn, err = (&net.Dialer{}).DialContext(ctx, network, address) })
		return conn, err
	}
	ln := listen(t, pod, "0.0.0.0:15006")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&proxy.Proxy{Log: log}).Ingress(ctx, ln, ports.Route) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	dial := func(port string, cfg *tls.Config) (string, error) {
		var conn net.Conn
		var err error
		in(t, neighbour, func() { conn, err = net.DialTimeout("tcp", "10.213.0.1:"+port, 5*time.Second) })
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if cfg != nil {
			tc := tls.Client(conn, cfg)
			if err := tc.Handshake(); err != nil {
				return "", err
			}
			conn = tc
		}
		if _, err := conn.Write([]byte("GET / HTTP/1.0")); err != nil {
			return "", err
		}
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	serverOnly := &tls.Config{RootCAs: ca.Pool(), ServerName: "main.default", MinVersion: tls.VersionTLS13}
	withCert := serverOnly.Clone()
	withCert.Certificates = []tls.Certificate{ca.Issue(t, "client.default")}

	for _, c := range []struct {
		name, port string
		tls        *tls.Config
		want       string // "" : refused
	}{
		{"main over TLS, no client certificate asked", "8001", serverOnly, "8001:GE"},
		{"main in plain text", "8001", nil, ""},
		{"metrics in plain text, not redirected", "8080", nil, "8080:GE"},
		{"an unlisted port with a mesh client certificate", "9000", withCert, "9000:GE"},
		{"an unlisted port without a client certificate", "9000", serverOnly, ""},
		{"an unlisted port in plain text", "9000", nil, ""},
		{"the proxy's own port", "15006", withCert, ""},
		{"the admin port, not redirected", "15000", nil, "15000:GE"},
	} {
		got, err := dial(c.port, c.tls)
		if c.want == "" && got != "" && strings.Contains(got, ":GE") {
			t.Errorf("%s: reached the app: %q", c.name, got)
		}
		if c.want != "" && got != c.want {
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
	if !strings.Contains(logs.String(), "peer=spiffe://"+meshtest.TrustDomain+"/policy/"+meshtest.Policy+"/service/client.default") {
		t.Errorf("the access log does not name the client's workload:\n%s", logs)
	}

	if err := redirect.Remove(nft); err != nil {
		t.Fatal(err)
	}
	if present, err := redirect.Present(nft); err != nil || present {
		t.Errorf("after Remove: %v %v", present, err)
	}
	if got, err := dial("9000", nil); got != "9000:GE" {
		t.Errorf("without the redirect the app answers directly: %q %v", got, err)
	}
}
