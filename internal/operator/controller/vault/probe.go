package vault

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// maxAnswer bounds what the operator reads of one of Vault's answers (a
// few hundred bytes).
const maxAnswer = 64 << 10

// errNotVaults: the replica's certificate is CAS's, for another service.
var errNotVaults = errors.New("the certificate is not of the Vault's service")

// probe reads every replica's pod and, where it runs, its API.
func (k *Kind) probe(ctx context.Context, v *servicesv1beta1.Vault, rootCA []byte) []Replica {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rootCA)
	svc, _ := ServiceName(v)
	want := MeshName{Policy: PolicyName(v), Service: svc}
	out := make([]Replica, max(v.Spec.Replicas, 1))
	for i := range out {
		r := Replica{Name: fmt.Sprintf("%s-%d", v.Name, i)}
		pod := &corev1.Pod{}
		switch err := k.Reader.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: r.Name}, pod); {
		case err != nil:
			r.Err = err
		case pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil:
			r.Pod, r.Err = pod, fmt.Errorf("pod %s is %s", r.Name, pod.Status.Phase)
		default:
			r.Pod = pod
			addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port(v)))
			r.Health, r.Err = ReadReplica(ctx, addr, ReplicaHost(v, i), pool, want)
			var verr *tls.CertificateVerificationError
			r.Untrusted = errors.As(r.Err, &verr) || errors.Is(r.Err, errNotVaults)
		}
		out[i] = r
	}
	return out
}

// MeshName is the workload identity a replica's certificate must name.
type MeshName struct{ Policy, Service string }

// ReadReplica reads one replica's health and leader over TLS that chains
// to CAS's root (roots), for the replica's name, from a certificate of
// the Vault's service: only a pod CAS attested as it has one.
func ReadReplica(ctx context.Context, addr, serverName string, roots *x509.CertPool, want MeshName) (*Health, error) {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS13,
			VerifyConnection: func(cs tls.ConnectionState) error {
				id, err := wire.CertMeshID(cs.PeerCertificates[0])
				if err != nil || id.Policy != want.Policy || id.Service != want.Service {
					return errNotVaults
				}
				return nil
			},
		},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	base := "https://" + net.JoinHostPort(serverName, p)
	var h struct {
		Initialized bool   `json:"initialized"`
		Sealed      bool   `json:"sealed"`
		Standby     bool   `json:"standby"`
		Version     string `json:"version"`
	}
	// Every state answers 200, so the body says which it is.
	if err := get(ctx, c, base+"/v1/sys/health?standbyok=true&perfstandbyok=true&sealedcode=200&uninitcode=200", &h); err != nil {
		return nil, err
	}
	out := &Health{Initialized: h.Initialized, Sealed: h.Sealed, Standby: h.Standby, Version: h.Version}
	if !h.Initialized || h.Sealed {
		return out, nil
	}
	var l struct {
		IsSelf bool   `json:"is_self"`
		Leader string `json:"leader_address"`
	}
	if err := get(ctx, c, base+"/v1/sys/leader", &l); err != nil {
		return nil, err
	}
	out.IsSelf, out.Leader = l.IsSelf, l.Leader
	return out, nil
}

// get reads one of Vault's unauthenticated answers. Vault adds fields
// between versions, so only the ones named are read.
func get(ctx context.Context, c *http.Client, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	switch {
	case err != nil:
		return err
	case len(body) > maxAnswer:
		return fmt.Errorf("%s: answer over %d bytes", req.URL.Path, maxAnswer)
	case res.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: %s", req.URL.Path, res.Status)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("%s: %w", req.URL.Path, err)
	}
	return nil
}
