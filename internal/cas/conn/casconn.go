// Package conn owns how a CAS resource is reached and trusted: the
// names its chart gives it (Service, pod), parsing the casAddress of a
// policy, dialling its pod past the cluster's DNS and Service proxies, and
// the evidence a client expects of it (simulated only when the resource
// asks for simulation). The operator dials the pod from its cache; the CLI
// dials through a port-forward (portforward.go).
package conn

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/tee"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// Names a CAS resource's chart gives its objects.
const (
	// ReleasePrefix names the release (and StatefulSet) of CAS NAME:
	// cas-NAME; its one pod is cas-NAME-0.
	ReleasePrefix = "cas"
	// Port is CAS's HTTPS port in its container.
	Port = 8081
)

// PodName is the first pod of the CAS called name.
func PodName(name string) string { return PodNames(name, 1)[0] }

// ReplicasInOrder orders the CAS pods names for a client to try: ready
// ones first, then running ones (an uninitialised CAS is not ready); a
// pod that is gone or terminating is left out, since its CAS is closing.
func ReplicasInOrder(ctx context.Context, r client.Reader, namespace string, names []string) ([]string, error) {
	var ready, running []string
	var errs []error
	for _, name := range names {
		pod := &corev1.Pod{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := PodAddress(pod); err != nil {
			errs = append(errs, err)
			continue
		}
		if podReady(pod) {
			ready = append(ready, name)
		} else {
			running = append(running, name)
		}
	}
	if out := append(ready, running...); len(out) > 0 {
		return out, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNotRunning, errors.Join(errs...))
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodNames are the pods of the CAS called name with replicas replicas
// (at least one), in order.
func PodNames(name string, replicas int32) []string {
	out := make([]string, max(replicas, 1))
	for i := range out {
		out[i] = fmt.Sprintf("%s-%s-%d", ReleasePrefix, name, i)
	}
	return out
}

// InitTokenSecret is the Secret holding CAS NAME's one-time init token
// (key InitTokenKey): the operator makes it, the CAS pod mounts it, and
// cloister cas init --cluster reads it.
func InitTokenSecret(name string) string { return ReleasePrefix + "-" + name + "-init-token" }

// InitTokenKey is the token's key in InitTokenSecret.
const InitTokenKey = "token"

// SimulationKeySecret is the Secret with the key a simulated CAS NAME
// signs its own evidence with (key SimulationKeyKey): the operator makes
// it, only the CAS pod mounts it.
func SimulationKeySecret(name string) string { return ReleasePrefix + "-" + name + "-simulation-key" }

// SimulationConfigMap is where the operator publishes a simulated CAS
// NAME's simulation keys: CASKeyItem, the public key its own evidence is
// signed by, for clients in pods to pin; WorkloadKeysItem, the keys whose
// workload evidence CAS takes (its LAS nodes' and the resource's
// spec.simulationKeys).
func SimulationConfigMap(name string) string { return ReleasePrefix + "-" + name + "-simulation" }

// Keys of SimulationKeySecret and SimulationConfigMap.
const (
	SimulationKeyKey = "key.pem"
	CASKeyItem       = "cas.pem"
	WorkloadKeysItem = "workloads.pem"
)

// Ref names a CAS resource and the Service port an address uses.
type Ref struct {
	Namespace, Name string
	Port            int
}

// URL is the address clients use: the Service's DNS name, which CAS's
// certificate names, whatever carries the connection.
func (r Ref) URL() string {
	return fmt.Sprintf("https://%s.%s.svc:%d", r.Name, r.Namespace, r.Port)
}

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// ParseAddress reads a policy's casAddress: the CAS resource's Service,
// NAME.NAMESPACE[.svc[.cluster.local]]:PORT, optionally with https://.
func ParseAddress(addr string) (Ref, error) {
	hostPort := strings.TrimSuffix(strings.TrimPrefix(addr, "https://"), "/")
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return Ref{}, fmt.Errorf("casAddress %q: %w: use NAME.NAMESPACE.svc:PORT, the Service of a CAS resource", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return Ref{}, fmt.Errorf("casAddress %q: port %q is not a port number", addr, port)
	}
	host = strings.TrimSuffix(strings.TrimSuffix(host, ".cluster.local"), ".svc")
	parts := strings.Split(host, ".")
	if len(parts) != 2 {
		return Ref{}, fmt.Errorf("casAddress %q: use NAME.NAMESPACE.svc:PORT, the Service of a CAS resource in this cluster", addr)
	}
	for _, p := range parts {
		if errs := validation.IsDNS1123Label(p); len(errs) > 0 {
			return Ref{}, fmt.Errorf("casAddress %q: %q: %s", addr, p, strings.Join(errs, "; "))
		}
	}
	return Ref{Namespace: parts[1], Name: parts[0], Port: p}, nil
}

// ParseRef reads NAMESPACE/NAME.
func ParseRef(s string) (Ref, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Ref{}, fmt.Errorf("%q: name a CAS resource as NAMESPACE/NAME", s)
	}
	return Ref{Namespace: ns, Name: name, Port: int(servicesv1beta1.DefaultClientPort)}, nil
}

// Expect is what a client demands of the CAS of cas: simulated evidence
// only when the resource asks for simulation (and then the claims say
// Insecure), signed by the simulation key the operator made for it
// (status.simulationKey); in a confidential VM, the VM's evidence with the
// launch measurement the resource names (and on TDX its RTMR0-2) and the
// host data of CAS's own pod policy (status.hostData): a pod of the same
// runtime class shares the measurement, never the host data; in an SGX
// enclave, the DCAP quote of the MRENCLAVE the resource names, which
// measures CAS, Gramine and the manifest's command line alike.
func Expect(cas *servicesv1beta1.CAS) casclient.Expect {
	e := casclient.Expect{Policy: attest.Policy{AllowSimulation: cas.Spec.Simulation}}
	if vm := cas.Spec.ConfidentialVM; vm != nil {
		// The CRD admits 96 hex digits only, and the operator publishes
		// 64. Anything else must match no CAS, never every CAS: an empty
		// value would pin nothing.
		nothing := []byte("not a measurement")
		m, err := hex.DecodeString(vm.Measurement)
		if err != nil || len(m) != 48 {
			m = nothing
		}
		hostData, err := hex.DecodeString(cas.Status.HostData)
		if err != nil || len(hostData) != 32 {
			hostData = nothing // not published yet
		}
		id := attest.Identity{Type: attest.Type(vm.Platform)}
		if id.Type == attest.TDX {
			id.MRTD = m
			// MRCONFIGID is 48 bytes: the digest, zero-padded.
			id.MRCONFIGID = append(append([]byte{}, hostData...), make([]byte, 48-min(len(hostData), 48))...)
			id.RTMR = make([]attest.Bytes, 3)
			for i := range id.RTMR {
				id.RTMR[i] = nothing
				if i < len(vm.RTMRs) {
					if r, err := hex.DecodeString(vm.RTMRs[i]); err == nil && len(r) == 48 {
						id.RTMR[i] = r
					}
				}
			}
		} else {
			id.Type, id.Measurement, id.HostData = attest.SNP, m, hostData
		}
		e.Policy.Identities = []attest.Identity{id}
	}
	if enc := cas.Spec.SGX; enc != nil {
		// The CRD admits 64 hex digits only; anything else matches no
		// enclave.
		m, err := hex.DecodeString(enc.MREnclave)
		if err != nil || len(m) != 32 {
			m = []byte("not a measurement")
		}
		e.Policy.Identities = []attest.Identity{{Type: attest.SGX, MRENCLAVE: m}}
	}
	if cas.Spec.Simulation {
		// Unparsable or not published yet: no key, which the client
		// refuses by name.
		if k, err := keyfile.ParsePublic([]byte(cas.Status.SimulationKey)); err == nil {
			e.Verify.SimKeys = []*ecdsa.PublicKey{k}
		}
	}
	return e
}

// ErrNotRunning: the CAS pod is not (yet) there to be dialled.
var ErrNotRunning = errors.New("the CAS pod is not running")

// PodAddress is where CAS listens in pod: its IP and CAS's port.
func PodAddress(pod *corev1.Pod) (string, error) {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return "", fmt.Errorf("%w: pod %s/%s is %s", ErrNotRunning, pod.Namespace, pod.Name, orPhase(pod))
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(Port)), nil
}

func orPhase(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "terminating"
	}
	if pod.Status.Phase == "" {
		return "not scheduled"
	}
	return strings.ToLower(string(pod.Status.Phase))
}

// DialTo dials addr whatever address the client asks for: the client keeps
// the Service's name for the URL (and the certificate check), while the
// connection goes to the pod.
func DialTo(addr string) casclient.DialFunc {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

// ErrSimulatedNode: the CAS pod is on a node that runs nothing (a dev
// cluster's simulated node), so its address is backed by nothing.
var ErrSimulatedNode = errors.New("simulated node: nothing runs there")

// onRealNode refuses a pod on a simulated node: its address is no one's,
// and a connection to it could only leave the machine.
func (c *Connector) onRealNode(ctx context.Context, pod *corev1.Pod) error {
	node := &corev1.Node{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: pod %s/%s is on node %s, which does not exist", ErrNotRunning, pod.Namespace, pod.Name, pod.Spec.NodeName)
		}
		return fmt.Errorf("reading node %s of pod %s/%s: %w", pod.Spec.NodeName, pod.Namespace, pod.Name, err)
	}
	if node.Labels[tee.LabelSimulatedNode] == "true" {
		return fmt.Errorf("pod %s/%s is on %s, a %w; schedule CAS on a real node (spec.nodeSelector)", pod.Namespace, pod.Name, node.Name, ErrSimulatedNode)
	}
	return nil
}

// Connector reaches CAS resources from inside the cluster: it finds the
// CAS pod in Reader (the operator's cache) and dials its IP, past the
// cluster's DNS and Service proxies, keeping the Service's name for the
// URL.
type Connector struct {
	Reader client.Reader
	// Dial, when set, replaces dialling the pod's address (tests run CAS
	// on loopback).
	Dial func(podAddress string) casclient.DialFunc
}

// Connect attests a replica of the CAS of cas and returns a client pinned
// to its key: the replicas in turn, until one answers, so that one that
// died (or is being replaced) does not stop the caller.
func (c *Connector) Connect(ctx context.Context, cas *servicesv1beta1.CAS) (*casclient.Client, *casclient.Attested, error) {
	names, err := ReplicasInOrder(ctx, c.Reader, cas.Namespace, PodNames(cas.Name, cas.Spec.Replicas))
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, name := range names {
		cl, att, err := c.connectPod(ctx, cas, name)
		if err == nil {
			return cl, att, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, nil, errs[0]
	}
	return nil, nil, fmt.Errorf("no replica of CAS %s/%s answered: %w", cas.Namespace, cas.Name, errors.Join(errs...))
}

// connectPod attests the CAS replica in pod name.
func (c *Connector) connectPod(ctx context.Context, cas *servicesv1beta1.CAS, name string) (*casclient.Client, *casclient.Attested, error) {
	pod := &corev1.Pod{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: cas.Namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("%w: pod %s/%s does not exist yet", ErrNotRunning, cas.Namespace, name)
		}
		return nil, nil, err
	}
	addr, err := PodAddress(pod)
	if err != nil {
		return nil, nil, err
	}
	if err := c.onRealNode(ctx, pod); err != nil {
		return nil, nil, err
	}
	dial := DialTo(addr)
	if c.Dial != nil {
		dial = c.Dial(addr)
	}
	ref := Ref{Namespace: cas.Namespace, Name: cas.Name, Port: int(cas.Spec.Service.ClientPort)}
	return casclient.NewAttested(ctx, ref.URL(), Expect(cas), dial)
}
