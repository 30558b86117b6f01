package las

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

const webImage = "registry.example/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Against a real API server, watching it: LAS names the calling pod's policy (the pod
// found by the caller's address on LAS's node), refuses a pod that runs
// something else than its policy says, and names nothing for a caller
// that is no pod of its node.
func TestEvidenceNamesTheCallingPodsPolicy(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(testenv.Start(t, testenv.Options{}))
	ctx := context.Background()
	spec := corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "web", Image: webImage, Args: []string{"serve"}}}}
	policy, err := podpolicy.Of(&spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	value, digest := policy.AnnotationValue()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{podpolicy.Annotation: value}}, Spec: spec}
	pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The test's requests come from 127.0.0.1: that is the pod's address.
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
	if pod, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	key, _ := keyfile.LoadOrCreate("")
	serve := func(node string) string {
		pods := &Pods{Client: cs, Node: node}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := pods.Start(ctx); err != nil {
			t.Fatal(err)
		}
		s := &Server{Probe: &Probe{DevRoot: t.TempDir()}, Quoter: &sim.Quoter{Key: key}, Pods: pods}
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(ts.Close)
		return ts.URL
	}
	hostData := func(url string) (int, string, []byte) {
		code, body := post(t, url, `{"reportData":"aa"}`)
		if code != 200 {
			return code, "", body
		}
		var resp laswire.EvidenceResponse
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		c, err := sim.Verify(resp.Evidence, time.Now(), &key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sim == nil {
			return code, "", body
		}
		return code, c.Sim.HostData.String(), body
	}

	onNode := serve("node-a")
	if code, got, body := hostData(onNode); code != 200 || got != digest {
		t.Fatalf("the pod's evidence: %d host data %q, want %s (%s)", code, got, digest, body)
	}
	if code, got, _ := hostData(serve("node-b")); code != 200 || got != "" {
		t.Errorf("LAS of another node named a policy: %d %q", code, got)
	}

	// Another image than the policy's: no evidence, and the reason.
	pod.Spec.Containers[0].Image = strings.Replace(webImage, "0123", "dead", 1)
	if _, err := cs.CoreV1().Pods("default").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watch brings the change within moments.
	var code int
	var body []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if code, _, body = hostData(onNode); code != 200 {
			break
		}
	}
	if code != 403 || !strings.Contains(string(body), "pod default/web: the pod does not run what its policy annotation says: containers[0] (web): image") {
		t.Errorf("a departed pod: %d %s", code, body)
	}
}
