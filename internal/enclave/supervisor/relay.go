package supervisor

import (
	"context"
	"net"
	"strconv"

	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
)

// relay serves the enclave's network from the pod, as the manifest it
// booted with declares: each plugin port on the pod (ListenHost) relayed
// into the enclave over its channel, and each egress relayed from the
// channel to its address in the cluster, with the service mesh's proxy
// (its connection cap and idle timeout), until ctx ends (the proxy then
// closes the listeners). A port that
// cannot be served is logged, and the rest go on.
func (s *Supervisor) relay(ctx context.Context, enc Enclave, m *manifest.Manifest) {
	ch := enc.Channel()
	if ch == nil {
		return
	}
	p := &proxy.Proxy{Log: s.Log.With("relay", "enclave")}
	ports := 0
	for _, pl := range m.Plugins {
		for _, port := range pl.Ports {
			ln, err := net.Listen("tcp", net.JoinHostPort(s.ListenHost, strconv.Itoa(int(port.Port))))
			if err != nil {
				s.Log.Error("cannot relay a plugin's port into the enclave", "plugin", pl.Name, "port", port.Port, "error", err.Error())
				continue
			}
			ports++
			dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return ch.DialPort(ctx, uint32(port.Port)) } //nolint:gosec // 1-65535
			target := "enclave:" + strconv.Itoa(int(port.Port))
			go func() {
				_ = p.Ingress(ctx, ln, func(net.Conn) (proxy.Route, error) { return proxy.Route{Target: target, Dial: dial}, nil })
			}()
		}
	}
	for i, e := range m.Egress {
		ln, err := ch.ListenEgress(uint32(i))
		if err != nil {
			s.Log.Error("cannot relay an egress out of the enclave", "egress", e.Name, "error", err.Error())
			continue
		}
		go func() { _ = p.Ingress(ctx, ln, proxy.Fixed(e.Address, nil)) }()
	}
	s.Log.Info("relaying the enclave's ports", "ports", ports, "egress", len(m.Egress))
}
