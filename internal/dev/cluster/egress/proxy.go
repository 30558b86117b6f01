// Package egress owns the dev cluster API server's egress proxy: the API
// server sends its "cluster" traffic (webhooks, aggregated APIs, a node's
// logs, exec and port-forward) and its "controlplane" traffic (webhooks by
// URL) through it as HTTP CONNECT requests on a unix socket, and it
// connects only to destinations on this machine. Without root, when no
// routing rule can make the simulated ranges unreachable, it is what keeps
// the API server from calling a simulated pod's address off the machine;
// with root it stands behind the rules.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Limits of the proxy: one client (the API server), few tunnels at once.
const (
	maxHeaderBytes = 8 << 10
	maxConns       = 512
	headerTimeout  = 10 * time.Second
	dialTimeout    = 10 * time.Second
)

// Proxy serves CONNECT requests to destinations on this machine.
type Proxy struct {
	// Route is the kernel's route to an address; nil asks the kernel.
	Route func(netip.Addr) (Route, error)
	// Dial connects to an allowed destination; nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	Log  *slog.Logger
}

// KernelRoute asks the kernel for the route to addr (as `ip route get`).
func KernelRoute(addr netip.Addr) (Route, error) {
	rs, err := netlink.RouteGet(addr.AsSlice())
	if err != nil {
		return Route{}, err
	}
	if len(rs) == 0 {
		return Route{}, errors.New("no route")
	}
	r := Route{Local: rs[0].Type == unix.RTN_LOCAL, Gw: rs[0].Gw != nil}
	if l, err := netlink.LinkByIndex(rs[0].LinkIndex); err == nil {
		r.Dev = l.Attrs().Name
	}
	return r, nil
}

// Serve answers connections on l until ctx ends.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	sem := make(chan struct{}, maxConns)
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accepting: %w", err)
		}
		select {
		case sem <- struct{}{}:
		default:
			_ = reply(c, http.StatusServiceUnavailable, "too many tunnels")
			_ = c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p.handle(ctx, c)
		}()
	}
}

// handle reads one CONNECT request and, for a destination on this
// machine, splices the connection to it.
func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	defer func() { _ = c.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
	br := bufio.NewReaderSize(io.LimitReader(c, maxHeaderBytes), maxHeaderBytes)
	req, err := http.ReadRequest(br)
	if err != nil {
		_ = reply(c, http.StatusBadRequest, "unreadable request")
		return
	}
	if req.Method != http.MethodConnect {
		_ = reply(c, http.StatusMethodNotAllowed, "only CONNECT")
		return
	}
	if br.Buffered() > 0 {
		// The client speaks after the reply, never before.
		_ = reply(c, http.StatusBadRequest, "data before the tunnel")
		return
	}
	target, err := ParseTarget(req.RequestURI)
	if err != nil {
		p.refuse(c, http.StatusBadRequest, req.RequestURI, err)
		return
	}
	route := p.Route
	if route == nil {
		route = KernelRoute
	}
	r, rerr := route(target.Addr())
	if err := Judge(target.Addr(), r, rerr); err != nil {
		p.refuse(c, http.StatusForbidden, target.String(), err)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	dial := p.Dial
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
	}
	up, err := dial(dctx, target.String())
	cancel()
	if err != nil {
		p.refuse(c, http.StatusBadGateway, target.String(), err)
		return
	}
	defer func() { _ = up.Close() }()
	_ = c.SetReadDeadline(time.Time{})
	if reply(c, http.StatusOK, "connection established") != nil {
		return
	}
	done := make(chan struct{}, 2)
	splice := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go splice(up, c)
	go splice(c, up)
	select {
	case <-done:
		<-done
	case <-ctx.Done():
	}
}

func (p *Proxy) refuse(c net.Conn, code int, target string, why error) {
	if p.Log != nil {
		p.Log.Warn("refused", "target", target, "code", code, "reason", why.Error())
	}
	_ = reply(c, code, why.Error())
}

// reply writes a response without a body; its reason phrase carries why,
// which the API server quotes in its error (a webhook call's, say).
func reply(c net.Conn, code int, why string) error {
	why = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, why)
	_ = c.SetWriteDeadline(time.Now().Add(headerTimeout))
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n", code, why)
	_ = c.SetWriteDeadline(time.Time{})
	return err
}
