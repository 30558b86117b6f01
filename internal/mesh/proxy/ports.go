package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"

	"github.com/cloister-cc/cloister/internal/mesh/annotation"
)

// Ports routes the connections the pod's redirect sends to the ingress
// proxy by the port each was sent to: listed ports as the ingress
// annotation says, every other port with mTLS, all to the app at the
// same port: on loopback, or where the connection was sent (the pod's
// address) for an app that listens only there.
type Ports struct {
	// Dial, if set, opens the connections to the app.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	config   annotation.IngressConfig
	reserved []uint16
	mutual   *tls.Config
	server   *tls.Config
}

// appHost is where the app listens for the proxy.
const appHost = "127.0.0.1"

// NewPorts routes by cfg with the workload certificates of certs. The
// proxy's own ports (reserved) are never forwarded: a connection sent to
// one would reach the proxy again.
func NewPorts(cfg annotation.IngressConfig, certs *Certs, reserved ...uint16) *Ports {
	return &Ports{config: cfg, reserved: reserved, mutual: certs.ServerConfig(true), server: certs.ServerConfig(false)}
}

// Route is the Router of p.
func (p *Ports) Route(conn net.Conn) (Route, error) {
	dst, err := OriginalDst(conn)
	if err != nil {
		return Route{}, err
	}
	return p.route(dst)
}

func (p *Ports) route(dst netip.AddrPort) (Route, error) {
	port := dst.Port()
	if slices.Contains(p.reserved, port) {
		return Route{}, fmt.Errorf("port %d is the proxy's own", port)
	}
	r := Route{Target: net.JoinHostPort(appHost, strconv.Itoa(int(port))), TLS: p.mutual, Dial: p.dialApp(dst)}
	for _, in := range p.config.Ports {
		if in.Port != port {
			continue
		}
		switch in.TLS {
		case annotation.ServerTLS:
			r.TLS = p.server
		case annotation.Plain:
			// Not redirected; should one arrive all the same, it is
			// what the annotation asks for.
			r.TLS = nil
		}
	}
	return r, nil
}

// dialApp dials the app on loopback, and where loopback refuses, at the
// address the connection was sent to. That address is local: the
// proxy's own connection to it is not redirected again (the redirect
// takes only what arrives from outside the pod).
func (p *Ports) dialApp(dst netip.AddrPort) func(ctx context.Context, network, address string) (net.Conn, error) {
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || !dst.IsValid() || dst.String() == address {
			return c, err
		}
		return dial(ctx, network, dst.String())
	}
}
