package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// ProxyTCP accepts connections on l and joins each to a new connection to
// upstream until ctx ends. It is how pods on the real node reach the API
// server: they dial the `kubernetes` Service address, which is on the
// node's bridge, and TLS passes through untouched (the API server's
// certificate names that address).
func ProxyTCP(ctx context.Context, l net.Listener, upstream string) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			time.Sleep(10 * time.Millisecond) // transient (EMFILE and the like)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = c.Close() }()
			u, err := dialer.DialContext(ctx, "tcp", upstream)
			if err != nil {
				return
			}
			defer func() { _ = u.Close() }()
			join(c, u)
		}()
	}
}

// join copies both ways until either side is done, then closes both.
func join(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// ProxyPodName is the static pod of the API server proxy (its mirror pod
// in kube-system is named <ProxyPodName>-<node>).
const ProxyPodName = "apiserver-proxy"

// ProxyPod is the static pod that runs `cloister dev apiserver-proxy` from
// Cloister's CLI image on the node's network: the kubelet keeps it running
// before and without the API server.
func ProxyPod(image string, listen, upstream string) ([]byte, error) {
	// Port 443 needs NET_BIND_SERVICE, which only root keeps in a
	// container; it is the only capability.
	return staticPod(ProxyPodName, corev1.Container{
		Name: "proxy", Image: image,
		Args: []string{"dev", "apiserver-proxy", "--listen", listen, "--upstream", upstream},
	}, []corev1.Capability{"NET_BIND_SERVICE"}, nil)
}

// staticPod is a static pod of the node in kube-system running c (from an
// image the node imported) on the node's network as root, with no
// capability but add, no escalation and a read-only root.
func staticPod(name string, c corev1.Container, add []corev1.Capability, volumes []corev1.Volume) ([]byte, error) {
	c.ImagePullPolicy = corev1.PullNever
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser:                ptr.To[int64](0),
		RunAsNonRoot:             ptr.To(false),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: add},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "cloister"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers:        []corev1.Container{c},
			Volumes:           volumes,
		},
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s pod: %w", name, err)
	}
	return data, nil
}
