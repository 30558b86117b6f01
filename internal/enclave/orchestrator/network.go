package orchestrator

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
)

// network relays the enclave's ports: each plugin port from the channel
// to the plugin on loopback (ingress), each egress from its loopback port
// to the channel (egress), with the service mesh's proxy (its connection
// cap and idle timeout).
type network struct {
	ctx     context.Context
	cancel  context.CancelFunc
	ingress map[int32]net.Listener
	egress  bool
}

// syncNetwork opens the listeners m declares and closes those it no
// longer does; the egresses are fixed at boot. Called with o.mu held.
func (o *Orchestrator) syncNetwork(m *manifest.Manifest) error {
	if o.Channel == nil {
		return nil
	}
	if o.net == nil {
		ctx, cancel := context.WithCancel(context.Background())
		o.net = &network{ctx: ctx, cancel: cancel, ingress: map[int32]net.Listener{}}
	}
	n := o.net
	p := &proxy.Proxy{Log: o.log().With("relay", "enclave")}
	want := map[int32]bool{}
	for _, pl := range m.Plugins {
		for _, port := range pl.Ports {
			want[port.Port] = true
			if _, ok := n.ingress[port.Port]; ok {
				continue
			}
			ln, err := o.Channel.ListenPort(uint32(port.Port)) //nolint:gosec // 1-65535, validated
			if err != nil {
				return fmt.Errorf("port %d of plugin %s: %w", port.Port, pl.Name, err)
			}
			n.ingress[port.Port] = ln
			target := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port.Port)))
			go func() { _ = p.Ingress(n.ctx, ln, proxy.Fixed(target, nil)) }()
		}
	}
	for port, ln := range n.ingress {
		if !want[port] {
			_ = ln.Close()
			delete(n.ingress, port)
		}
	}
	if n.egress {
		return nil
	}
	n.egress = true
	for i, e := range m.Egress {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(e.Port))))
		if err != nil {
			return fmt.Errorf("egress %s: port %d: %w", e.Name, e.Port, err)
		}
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return o.Channel.DialEgress(ctx, uint32(i)) } //nolint:gosec // at most 16
		go func() {
			_ = p.Ingress(n.ctx, ln, func(net.Conn) (proxy.Route, error) { return proxy.Route{Target: e.Address, Dial: dial}, nil })
		}()
	}
	return nil
}

// stopNetwork ends every relay; the proxy closes their listeners.
func (o *Orchestrator) stopNetwork() {
	if o.net != nil {
		o.net.cancel()
	}
}

// portsAnswer says, for each port the plugins declare, whether something
// listens on it inside the enclave.
func portsAnswer(plugins []manifest.Plugin) []manifest.PortStatus {
	var out []manifest.PortStatus
	for _, pl := range plugins {
		for _, port := range pl.Ports {
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port.Port))), 200*time.Millisecond)
			if err == nil {
				_ = c.Close()
			}
			out = append(out, manifest.PortStatus{Plugin: pl.Name, Port: port.Port, Open: err == nil})
		}
	}
	return out
}
