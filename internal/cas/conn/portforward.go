package conn

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// PortForward forwards a loopback port to CAS's port in pod namespace/pod
// through the API server, as kubectl port-forward does (WebSocket first,
// SPDY as fallback), and returns a dialer to it once CAS answers there (a
// replica still starting does not, and its caller tries the next). Users need no
// LoadBalancer, NodePort or forwarder pod to reach a CAS, only the right to
// create pods/portforward. stop ends the forward.
func PortForward(ctx context.Context, cfg *rest.Config, namespace, pod string) (dial casclient.DialFunc, stop func(), err error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	tunneling, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, cfg)
	if err != nil {
		return nil, nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(tunneling, dialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	fctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreamingWithContext(fctx, dialer, []string{"127.0.0.1"},
		[]string{"0:" + strconv.Itoa(Port)}, ready, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("port-forwarding to pod %s/%s: %w", namespace, pod, err)
	case <-ctx.Done():
		cancel()
		return nil, nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		cancel()
		return nil, nil, fmt.Errorf("port-forwarding to pod %s/%s: no local port (%w)", namespace, pod, err)
	}
	local := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
	stopForward := func() {
		cancel()
		<-done //nolint:errcheck // how the forward ended once cancelled says nothing
	}
	dial = DialTo(local)
	if err := Answers(ctx, dial); err != nil {
		stopForward()
		return nil, nil, fmt.Errorf("port-forwarding to pod %s/%s: %w", namespace, pod, err)
	}
	return dial, stopForward, nil
}
