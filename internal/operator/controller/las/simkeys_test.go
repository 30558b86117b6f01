package las

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/las"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The operator reads each LAS pod's simulation key from the pod itself (a
// real LAS server here, its pod IP standing for loopback), once per pod;
// a pod on a simulated node is never dialled; a pod whose key cannot be
// read is read again.
func TestNodeKeys(t *testing.T) {
	ctx := context.Background()
	c, key := clientAndKey(t)
	srv := httptest.NewServer((&las.Server{Probe: &las.Probe{DevRoot: t.TempDir()}, Quoter: &sim.Quoter{Key: key}}).Handler())
	t.Cleanup(srv.Close)
	var asked []string
	up := true
	n := &NodeKeys{Reader: c, Get: func(ctx context.Context, url string) ([]byte, error) {
		asked = append(asked, url)
		if !up {
			return nil, io.ErrUnexpectedEOF
		}
		return httpGet(ctx, srv.URL+strings.TrimPrefix(url, "http://10.1.2.3:18766"))
	}}
	for name, simulated := range map[string]bool{"real": false, "kwok": true} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if simulated {
			node.Labels = map[string]string{tee.LabelSimulatedNode: "true"}
		}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(uid, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "las-" + uid, UID: types.UID("uid-" + uid)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{PodIP: "10.1.2.3"}}
	}

	up = false
	if _, err := n.Key(ctx, pod("a", "real"), 18766); err == nil || !n.Pending() {
		t.Errorf("LAS not answering: %v, pending %v", err, n.Pending())
	}
	up = true
	got, err := n.Key(ctx, pod("a", "real"), 18766)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if want := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})); got != want || n.Pending() {
		t.Errorf("key %q, want LAS's %q (pending %v)", got, want, n.Pending())
	}
	if len(asked) != 2 || asked[1] != "http://10.1.2.3:18766/v1/simulation-key" {
		t.Errorf("asked %v", asked)
	}
	if _, err := n.Key(ctx, pod("a", "real"), 18766); err != nil || len(asked) != 2 {
		t.Errorf("a pod's key is read once: %v, asked %d times", err, len(asked))
	}
	if _, err := n.Key(ctx, pod("b", "kwok"), 18766); err == nil || !strings.Contains(err.Error(), "simulated node") || len(asked) != 2 {
		t.Errorf("a pod on a simulated node: %v, asked %d times", err, len(asked))
	}
	n.Forget(nil)
	if _, err := n.Key(ctx, pod("a", "real"), 18766); err != nil || len(asked) != 3 {
		t.Errorf("after its pod went: %v, asked %d times", err, len(asked))
	}
}

// A LAS pod that is not ready because it cannot produce evidence is named
// with its reason (read from the pod); one that is not ready for its SGX
// device is not.
func TestNoEvidenceNamesTheNodes(t *testing.T) {
	ctx := context.Background()
	c, key := clientAndKey(t)
	noQuoter := httptest.NewServer((&las.Server{Probe: &las.Probe{DevRoot: t.TempDir()}}).Handler())
	t.Cleanup(noQuoter.Close)
	noDevice := &las.Probe{DevRoot: t.TempDir()}
	_ = noDevice.Check() // no device: not ready for that
	simulated := httptest.NewServer((&las.Server{Probe: noDevice, Quoter: &sim.Quoter{Key: key}}).Handler())
	t.Cleanup(simulated.Close)
	servers := map[string]string{"10.1.2.3": noQuoter.URL, "10.1.2.4": simulated.URL}
	k := &Kind{Keys: &NodeKeys{Reader: c, Get: func(ctx context.Context, url string) ([]byte, error) {
		for ip, to := range servers {
			if rest, ok := strings.CutPrefix(url, "http://"+ip+":18766"); ok {
				return httpGet(ctx, to+rest)
			}
		}
		t.Errorf("dialled %s", url)
		return nil, io.ErrUnexpectedEOF
	}}}
	var pods []corev1.Pod
	nodes := map[string]basev1beta1.LASNode{}
	for i, ip := range []string{"10.1.2.3", "10.1.2.4"} {
		name := []string{"no-quoter", "no-device"}[i]
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "las-" + name}, Spec: corev1.PodSpec{NodeName: name}, Status: corev1.PodStatus{PodIP: ip}})
		nodes[name] = basev1beta1.LASNode{Pod: "las-" + name}
	}
	reason, why := k.noEvidence(ctx, pods, 18766, nodes)
	if reason != health.ReasonLASNoEvidence || !strings.Contains(why, "LAS cannot produce evidence on no-quoter: this LAS cannot produce evidence: simulation is off") ||
		strings.Contains(why, "no-device") || !strings.Contains(why, "spec.simulation: true") {
		t.Errorf("why: %s %q", reason, why)
	}
	// A LAS that quotes through AESM, where the node has none: the
	// reason names the socket and what to install.
	noAESM := &las.DCAP{Client: &aesm.Client{Socket: "/nonexistent/aesm.socket"}}
	_ = noAESM.Check(ctx)
	dcap := httptest.NewServer((&las.Server{Probe: noDevice, DCAP: noAESM}).Handler())
	t.Cleanup(dcap.Close)
	servers["10.1.2.3"] = dcap.URL
	reason, why = k.noEvidence(ctx, pods, 18766, nodes)
	if reason != health.ReasonLASAESMUnreachable || !strings.Contains(why, "on no-quoter: aesm: cannot reach /nonexistent/aesm.socket") ||
		!strings.Contains(why, "start Intel's aesmd") {
		t.Errorf("without AESM: %s %q", reason, why)
	}
	// Ready pods are not asked.
	for n, v := range nodes {
		v.Ready = true
		nodes[n] = v
	}
	if _, why := k.noEvidence(ctx, pods, 18766, nodes); why != "" {
		t.Errorf("all ready: %q", why)
	}
}

// clientAndKey is a client of a real API server and a simulation key.
func clientAndKey(t *testing.T) (client.Client, *ecdsa.PrivateKey) {
	t.Helper()
	c, err := client.New(testenv.Start(t, testenv.Options{}), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyfile.LoadOrCreate("")
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}
