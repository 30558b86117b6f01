package las

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/base/tee"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// Bounds of one read of a LAS pod's simulation key: a PEM public key is
// some 180 bytes.
const (
	keyTimeout = 3 * time.Second
	maxKey     = 4 << 10
)

// NodeKeys reads the simulation key of each LAS pod in simulation (GET
// /v1/simulation-key at the pod's IP and port) so that the operator can
// publish it to the simulated CASes, which take simulated workload
// evidence from those keys only. A pod keeps its key for its life, so
// each pod is read once.
type NodeKeys struct {
	// Reader finds the pod's node: a simulated node's pod address is no
	// one's, and is never dialled.
	Reader client.Reader
	// Get reads url; nil: plain HTTP with a short timeout. Tests serve
	// LAS on loopback.
	Get func(ctx context.Context, url string) ([]byte, error)

	mu    sync.Mutex
	byPod map[types.UID]string
	// failed are the pods whose key could not be read: read again soon.
	failed map[types.UID]bool
}

// ErrSimulatedNode: the pod is on a node that runs nothing (a dev
// cluster's simulated node), so it has no key to read.
var ErrSimulatedNode = errors.New("simulated node: nothing runs there")

// Key is the PEM simulation key of the ready LAS pod p listening on
// port, or "" with the reason it is not known.
func (n *NodeKeys) Key(ctx context.Context, p *corev1.Pod, port int) (string, error) {
	n.mu.Lock()
	k, ok := n.byPod[p.UID]
	n.mu.Unlock()
	if ok && k == "" {
		return "", ErrSimulatedNode
	}
	if ok {
		return k, nil
	}
	k, err := n.read(ctx, p, port)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byPod == nil {
		n.byPod, n.failed = map[types.UID]string{}, map[types.UID]bool{}
	}
	switch {
	case errors.Is(err, ErrSimulatedNode):
		n.byPod[p.UID] = ""
	case err != nil:
		n.failed[p.UID] = true
	default:
		n.byPod[p.UID] = k
		delete(n.failed, p.UID)
	}
	return k, err
}

// Pending says whether a pod's key is to be read again.
func (n *NodeKeys) Pending() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.failed) > 0
}

func (n *NodeKeys) read(ctx context.Context, p *corev1.Pod, port int) (string, error) {
	raw, err := n.fromPod(ctx, p, port, "/v1/simulation-key")
	if err != nil {
		return "", fmt.Errorf("reading LAS pod %s's simulation key: %w", p.Name, err)
	}
	pub, err := keyfile.ParsePublic(raw)
	if err != nil {
		return "", fmt.Errorf("LAS pod %s's simulation key: %w", p.Name, err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// Status reads a LAS pod's GET /v1/status: whether it can serve evidence
// and which check fails.
func (n *NodeKeys) Status(ctx context.Context, p *corev1.Pod, port int) (laswire.Status, error) {
	var st laswire.Status
	raw, err := n.fromPod(ctx, p, port, "/v1/status")
	if err != nil {
		return st, fmt.Errorf("reading LAS pod %s's status: %w", p.Name, err)
	}
	if err := strictjson.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("LAS pod %s's status: %w", p.Name, err)
	}
	return st, nil
}

// fromPod GETs path from the LAS pod p, unless its node is a simulated
// one, whose pod address is no one's.
func (n *NodeKeys) fromPod(ctx context.Context, p *corev1.Pod, port int, path string) ([]byte, error) {
	if p.Status.PodIP == "" {
		return nil, errors.New("the pod has no IP yet")
	}
	node := &corev1.Node{}
	if err := n.Reader.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", p.Spec.NodeName, err)
	}
	if node.Labels[tee.LabelSimulatedNode] == "true" {
		return nil, fmt.Errorf("node %s: %w", node.Name, ErrSimulatedNode)
	}
	get := n.Get
	if get == nil {
		get = httpGet
	}
	ctx, cancel := context.WithTimeout(ctx, keyTimeout)
	defer cancel()
	return get(ctx, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))+path)
}

// Forget drops the pods not in live, so the cache follows the pods.
func (n *NodeKeys) Forget(live map[types.UID]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for uid := range n.byPod {
		if !live[uid] {
			delete(n.byPod, uid)
		}
	}
	for uid := range n.failed {
		if !live[uid] {
			delete(n.failed, uid)
		}
	}
}

func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKey+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	if len(body) > maxKey {
		return nil, fmt.Errorf("more than %d bytes", maxKey)
	}
	return body, nil
}
