package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/miekg/dns"
)

// TTL is how long an answer may be cached: pods come and go on a dev
// cluster, and CoreDNS's kubernetes plugin answers with 5 s too.
const TTL = 5

// Handler answers DNS queries from a Resolver: A records of the zone,
// NODATA for other types of names that exist, NXDOMAIN for names of the
// zone that do not, REFUSED for every other name (it is no recursor).
type Handler struct {
	Resolver *Resolver
	Log      *slog.Logger
}

// ServeDNS implements dns.Handler.
func (h *Handler) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := h.answer(req)
	// Over UDP an answer fits the asker's buffer, or says it was cut
	// (TC), and the asker comes again over TCP.
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	if err := w.WriteMsg(m); err != nil && h.Log != nil {
		h.Log.Debug("writing a DNS answer", "err", err)
	}
}

func (h *Handler) answer(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = false
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		m.Rcode = dns.RcodeNotImplemented
		return m
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return m
	}
	outcome, addrs, err := h.Resolver.Resolve(q.Name)
	switch {
	case err != nil:
		if h.Log != nil {
			h.Log.Warn("resolving a cluster name", "name", q.Name, "err", err)
		}
		m.Rcode = dns.RcodeServerFailure
	case outcome == NotOurs:
		m.Authoritative = false
		m.Rcode = dns.RcodeRefused
	case outcome == NoSuchName:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY:
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: TTL},
				A:   net.IP(a.AsSlice()),
			})
		}
	}
	return m
}

// Serve answers on UDP and TCP at addr until ctx ends. started, if not
// nil, is called once both listen.
func Serve(ctx context.Context, addr string, h *Handler, started func(udp, tcp net.Addr)) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("listening on udp %s: %w", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = pc.Close()
		return fmt.Errorf("listening on tcp %s: %w", addr, err)
	}
	servers := []*dns.Server{
		{PacketConn: pc, Handler: h, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second},
		{Listener: l, Handler: h, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			IdleTimeout: func() time.Duration { return 8 * time.Second }, MaxTCPQueries: 128},
	}
	errs, up := make(chan error, len(servers)), make(chan struct{}, len(servers))
	for _, s := range servers {
		s.NotifyStartedFunc = func() { up <- struct{}{} }
		go func() { errs <- s.ActivateAndServe() }()
	}
	// Shut down only servers that started: Shutdown refuses the others.
	for range servers {
		select {
		case <-up:
		case err = <-errs:
		}
	}
	if err == nil {
		if started != nil {
			started(pc.LocalAddr(), l.Addr())
		}
		select {
		case <-ctx.Done():
		case err = <-errs:
		}
	}
	for _, s := range servers {
		_ = s.Shutdown()
	}
	_, _ = pc.Close(), l.Close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
