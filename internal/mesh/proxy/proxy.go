package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// peerName is what the access log calls a caller: its workload identity,
// which the ingress authorized, or the certificate's subject when it has
// none (a route that does not authorize by identity).
func peerName(c *x509.Certificate) string {
	if id, err := wire.CertMeshID(c); err == nil {
		return id.String()
	}
	return c.Subject.CommonName
}

// handshakeTimeout bounds a TLS handshake: a client that never finishes
// one does not hold a goroutine for long.
const handshakeTimeout = 10 * time.Second

// Route is where one ingress connection goes.
type Route struct {
	// Target is the app, host:port on loopback.
	Target string
	// TLS terminates TLS first; nil: plain.
	TLS *tls.Config
	// Dial opens the connection to the app; nil: a plain net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Router picks the route of an accepted connection, or refuses it.
type Router func(conn net.Conn) (Route, error)

// Fixed routes every connection to target, terminating TLS with
// tlsConfig first (nil: plain).
func Fixed(target string, tlsConfig *tls.Config) Router {
	return func(net.Conn) (Route, error) { return Route{Target: target, TLS: tlsConfig}, nil }
}

// Proxy runs the mesh's listeners.
type Proxy struct {
	Log *slog.Logger
	// Count, if set, counts each connection by direction (Ingress,
	// Egress) and outcome.
	Count func(direction, outcome string)
	// MaxConnections caps the open connections of each listener (0:
	// DefaultMaxConnections); one over it is closed at once, counted
	// Limited and logged, while the open ones go on.
	MaxConnections int
	// MaxConnectionsPerSource caps, on Ingress listeners, the open
	// connections from one source address (0: no cap per source), so one
	// caller holding idle connections cannot take every slot of the
	// listener from the others; one over it is closed at once, counted
	// Limited and logged.
	MaxConnectionsPerSource int
	// IdleTimeout ends a connection neither side has sent on for this
	// long (0: DefaultIdleTimeout).
	IdleTimeout time.Duration
}

// Directions and outcomes of connections, as counted.
const (
	DirIngress = "ingress"
	DirEgress  = "egress"
	// Forwarded: passed on; Refused: turned away (a port or TLS the
	// configuration does not allow); Unreachable: the app or upstream
	// did not answer.
	Forwarded   = "forwarded"
	Refused     = "refused"
	Unreachable = "unreachable"
	// Limited: closed at once, the listener being at its connection cap.
	Limited = "limited"
)

func (p *Proxy) count(direction, outcome string) {
	if p.Count != nil {
		p.Count(direction, outcome)
	}
}

// Ingress forwards connections on ln to the app where route says,
// terminating TLS first where it says so.
func (p *Proxy) Ingress(ctx context.Context, ln net.Listener, route Router) error {
	log := p.Log
	return p.serve(ctx, ln, DirIngress, p.MaxConnectionsPerSource, func(conn net.Conn) {
		from := conn.RemoteAddr().String()
		r, err := route(conn)
		if err != nil {
			log.Info("ingress connection refused", "from", from, "error", err.Error())
			p.count(DirIngress, Refused)
			_ = conn.Close()
			return
		}
		peer := ""
		if r.TLS != nil {
			tc := newMeshTLS(conn, r.TLS, true)
			hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
			err := tc.HandshakeContext(hctx)
			cancel()
			if err != nil {
				log.Info("ingress handshake refused", "from", from, "target", r.Target, "error", err.Error())
				p.count(DirIngress, Refused)
				_ = conn.Close()
				return
			}
			if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
				peer = peerName(peers[0])
			}
			conn = tc
		}
		// The access log: who reached which port, as which workload.
		log.Info("ingress connection", "from", from, "target", r.Target, "tls", r.TLS != nil, "peer", peer)
		dial := r.Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		app, err := dial(ctx, "tcp", r.Target)
		if err != nil {
			log.Warn("ingress cannot reach the app", "target", r.Target, "error", err.Error())
			p.count(DirIngress, Unreachable)
			_ = conn.Close()
			return
		}
		p.count(DirIngress, Forwarded)
		p.pipe(conn, app)
	})
}

// dialTLS opens a mesh TLS connection to addr, its handshake done.
func dialTLS(ctx context.Context, addr string, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := newMeshTLS(raw, cfg, false)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return tc, nil
}

// Egress forwards connections on ln (a loopback address the app connects
// to) to upstream over mTLS: the workload certificate as the client's, the
// upstream verified against the mesh CA for its host name.
func (p *Proxy) Egress(ctx context.Context, ln net.Listener, upstream string, certs *Certs) error {
	log := p.Log
	host, _, err := net.SplitHostPort(upstream)
	if err != nil {
		return err
	}
	return p.serve(ctx, ln, DirEgress, 0, func(conn net.Conn) {
		cfg, err := certs.ClientConfig(host)
		if err != nil {
			log.Warn("egress without certificates", "upstream", upstream, "error", err.Error())
			p.count(DirEgress, Refused)
			_ = conn.Close()
			return
		}
		up, err := dialTLS(ctx, upstream, cfg)
		if err != nil {
			log.Warn("egress cannot reach the upstream", "upstream", upstream, "error", err.Error())
			p.count(DirEgress, Unreachable)
			_ = conn.Close()
			return
		}
		p.count(DirEgress, Forwarded)
		p.pipe(conn, up)
	})
}
