package vault

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

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
	if h := out[0].Health; h != nil && h.Initialized && v.Status.RecoveryKeysSecret == "" {
		addr := net.JoinHostPort(out[0].Pod.Status.PodIP, strconv.Itoa(port(v)+2))
		out[0].Recovery, out[0].RecoveryErr = replicaAPI(addr, ReplicaHost(v, 0), pool, want).Recovery(ctx)
	}
	return out
}

// MeshName is the workload identity a replica's certificate must name.
type MeshName struct{ Policy, Service string }

// replicaAPI is one replica's API at addr over TLS that chains to CAS's
// root (roots), for the replica's name, from a certificate of the Vault's
// service: only a pod CAS attested as it has one.
func replicaAPI(addr, serverName string, roots *x509.CertPool, want MeshName) *vaultinit.API {
	return replicaAPISeeing(addr, serverName, roots, want, nil)
}

// replicaAPISeeing is replicaAPI, keeping the replica's verified
// certificate in *seen.
func replicaAPISeeing(addr, serverName string, roots *x509.CertPool, want MeshName, seen **x509.Certificate) *vaultinit.API {
	return vaultinit.NewAPI(addr, &tls.Config{
		RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS13,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := wire.CertMeshID(cs.PeerCertificates[0])
			if err != nil || id.Policy != want.Policy || id.Service != want.Service {
				return errNotVaults
			}
			if seen != nil {
				*seen = cs.PeerCertificates[0]
			}
			return nil
		},
	})
}

// ReadReplica reads one replica's health and, unsealed, its leader, and
// the validity of the certificate it serves.
func ReadReplica(ctx context.Context, addr, serverName string, roots *x509.CertPool, want MeshName) (*Health, error) {
	var leaf *x509.Certificate
	api := replicaAPISeeing(addr, serverName, roots, want, &leaf)
	h, err := api.Health(ctx)
	if err != nil {
		return nil, err
	}
	out := &Health{Initialized: h.Initialized, Sealed: h.Sealed, Standby: h.Standby, Version: h.Version}
	if leaf != nil {
		out.NotBefore, out.NotAfter = leaf.NotBefore, leaf.NotAfter
	}
	if !h.Initialized || h.Sealed {
		return out, nil
	}
	l, err := api.Leader(ctx)
	if err != nil {
		return nil, err
	}
	out.IsSelf, out.Leader = l.IsSelf, l.Address
	return out, nil
}
