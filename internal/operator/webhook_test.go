package operator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/operator/admission"
)

const opNamespace = "cloister-system"

// operators numbers the operators this process started: each has its own
// certificate Secret (cert-controller's controller is named after it).
var operators atomic.Int32

// webhookConfigurations renders the operator chart's webhook
// configurations pointing at url, as for an operator beside the cluster.
func webhookConfigurations(t testing.TB, url string) []client.Object {
	t.Helper()
	values := map[string]any{
		"image":   "ghcr.io/cloister-cc/cloister-operator@sha256:" + strings.Repeat("0", 64),
		"webhook": map[string]any{"url": url, "urlHost": "localhost"},
	}
	out, err := charts.Render("cloister-operator", "cloister", opNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for _, doc := range strings.Split(out["cloister-operator/templates/webhooks.yaml"], "\n---\n") {
		var o client.Object = &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if strings.Contains(doc, "kind: MutatingWebhookConfiguration") {
			o = &admissionregistrationv1.MutatingWebhookConfiguration{}
		}
		if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	if len(objs) != 2 {
		t.Fatalf("%d webhook configurations rendered, want 2", len(objs))
	}
	return objs
}

// runOperator starts the operator (all controllers and the webhooks) on
// the control plane, its webhooks called by URL, and waits until they
// answer through the API server. It returns the webhook port and a stop
// function (also called at the end of t).
func runOperator(t testing.TB, cfg *rest.Config, validity time.Duration) (int, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // a network peer may have closed first

	ctrl.SetLogger(logr.Discard())
	c := newClient(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, o := range webhookConfigurations(t, "https://localhost:"+strconv.Itoa(port)) {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := New(ctx, cfg, Options{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", Namespace: opNamespace,
		SkipNameValidation: true, Registry: prometheus.NewRegistry(),
		Webhook: WebhookOptions{Port: port, Host: "127.0.0.1", CertSecret: "webhook-cert-" + strconv.Itoa(int(operators.Add(1))), DNSName: "localhost",
			CertDir: t.TempDir(), CertValidity: validity},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	// Serving: a policy that does not parse is refused by the webhook.
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Create(ctx, badPolicy("probe"), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "spec.policy") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks not serving after a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return port, stop
}

// newClient reads and writes every kind the operator knows.
func newClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func badPolicy(name string) *casv1beta1.SignedPolicy {
	return &casv1beta1.SignedPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: casv1beta1.SignedPolicySpec{CASAddress: "https://cas:8081", Policy: "name: [", Version: 1,
			Signatures: []casv1beta1.Signature{{Signer: "sha256:" + strings.Repeat("a", 64), Signature: strings.Repeat("A", 96)}}},
	}
}

// warnings collects the API server's warnings (admission warnings among them).
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

// Through a real API server, with certificates of 12 s (4 s of margin for
// a slow machine): the certificate is renewed without a failed request;
// each webhook refuses what it must, names the field, leaves nothing
// stored, defaults and injects; with the operator gone, unlabelled pods
// are admitted at once and pods asking for injection refused.
func TestWebhooks(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{"../../charts/cloister-operator/files/crds"}})
	port, stop := runOperator(t, cfg, 12*time.Second) // renewed with 4 s left
	warned := &warnings{}
	wcfg := rest.CopyConfig(cfg)
	wcfg.WarningHandler = warned
	c := newClient(t, wcfg)
	ctx := context.Background()
	t.Run("a renewed certificate is served at once, with no failed request and the caBundle unchanged", func(t *testing.T) {
		certificateRotation(t, c, port)
	})

	t.Run("a policy that does not parse is refused naming the field, and not stored", func(t *testing.T) {
		err := c.Create(ctx, badPolicy("bad"))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `SignedPolicy.cas.cloister.dev "bad" is invalid: spec.policy: Invalid value: the policy document is invalid`) {
			t.Fatalf("err %v", err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "bad"}, &casv1beta1.SignedPolicy{}); !apierrors.IsNotFound(err) {
			t.Errorf("stored anyway: %v", err)
		}
	})
	t.Run("a CEXPlugin sharing an APQN between sets is refused naming both", func(t *testing.T) {
		p := &basev1beta1.CEXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: basev1beta1.CEXPluginSpec{ConfigSets: []basev1beta1.CryptoConfigSet{
			{Name: "payments", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}},
			{Name: "audit", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}},
		}}}
		err := c.Create(ctx, p)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `configSets[1] (audit).apqns[0]: duplicate APQN 03.000b (adapter 3, domain 11), already in set "payments"`) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("an SGXPlugin gets the operator's namespace; an image by tag is warned about", func(t *testing.T) {
		p := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "defaults"}}
		p.Spec.Image = "ghcr.io/cloister-cc/cloister-device-plugin:v1"
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if p.Spec.Namespace != opNamespace {
			t.Errorf("spec.namespace %q, want %q", p.Spec.Namespace, opNamespace)
		}
		warned.mu.Lock()
		defer warned.mu.Unlock()
		if len(warned.got) != 1 || !strings.Contains(warned.got[0], "is named by tag, not by digest") {
			t.Errorf("warnings %q", warned.got)
		}
	})
	t.Run("a pod asking for SGX gets the device and its node's LAS", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "enclave", Namespace: "default", Labels: map[string]string{admission.LabelInject: admission.InjectSGX}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		ctr := pod.Spec.Containers[0]
		if q := ctr.Resources.Limits[corev1.ResourceName(tee.SGXEnclave)]; q.Value() != 1 {
			t.Errorf("limits %v", ctr.Resources.Limits)
		}
		if len(ctr.Env) != 2 || ctr.Env[1].Name != laswire.EnvAddr {
			t.Errorf("env %+v", ctr.Env)
		}
	})
	t.Run("with the operator stopped, other pods are admitted at once and a pod asking for injection is refused", func(t *testing.T) {
		stop()
		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "down-", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if err := c.Create(ctx, plain); err != nil || len(plain.Spec.Containers[0].Env) != 0 {
			t.Fatalf("an unlabelled pod: %v %+v", err, plain.Spec.Containers[0])
		}
		asking := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "down-", Namespace: "default", Labels: map[string]string{admission.LabelInject: admission.InjectSGX}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if err := c.Create(ctx, asking); err == nil || !strings.Contains(err.Error(), `failed calling webhook "inject.pods.cloister.dev"`) {
			t.Errorf("a pod asking for injection admitted without it: %v", err)
		}
		// Cloister's own kinds fail closed too.
		if err := c.Create(ctx, badPolicy("down")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Errorf("a policy admitted without its webhook: %v", err)
		}
	})
}

// served names the certificate the webhook serves now (by its hash:
// cert-controller gives every certificate serial number 1).
func served(t *testing.T, port int, roots *x509.CertPool) string {
	t.Helper()
	conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{ServerName: "localhost", RootCAs: roots})
	if err != nil {
		t.Fatalf("the served certificate does not verify against the caBundle: %v", err)
	}
	defer func() { _ = conn.Close() }()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].Raw)
	return hex.EncodeToString(sum[:8])
}

// certificateRotation: a certificate renewed before it expires is served
// at once, with the caBundle unchanged, and no admission request fails
// across the switch.
func certificateRotation(t *testing.T, c client.Client, port int) {
	ctx := context.Background()
	bundle := func() []byte {
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: WebhookConfiguration}, &v); err != nil {
			t.Fatal(err)
		}
		return v.Webhooks[0].ClientConfig.CABundle
	}
	ca := bundle()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("caBundle is not PEM: %q", ca)
	}
	certs := map[string]bool{served(t, port, roots): true}
	var requests, failed int
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		requests++
		err := c.Create(ctx, badPolicy("rotation"), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "spec.policy") {
			failed++
			t.Errorf("admission request %d: %v", requests, err)
		}
		certs[served(t, port, roots)] = true
		time.Sleep(20 * time.Millisecond)
	}
	if len(certs) < 3 {
		t.Errorf("%d certificates served in 30 s of 12 s certificates, want at least 3", len(certs))
	}
	if !bytes.Equal(bundle(), ca) {
		t.Error("the caBundle changed: renewing the serving certificate should not need that")
	}
	t.Logf("%d admission requests across %d certificates, %d failed", requests, len(certs), failed)
}

// Pods asking for injection, 50 a second, created through the API server
// (dry run). Reported: the p50 and p99 of the whole create, and the bucket
// bound under which 99% of the webhook's own handling fell (its histogram
// has decade buckets: 1 ms, 10 ms, ...).
func BenchmarkPodInjection50PerSecond(b *testing.B) {
	cfg := testenv.Start(b, testenv.Options{CRDDirectoryPaths: []string{"../../charts/cloister-operator/files/crds"}})
	runOperator(b, cfg, 0)
	c := newClient(b, cfg)
	ctx := context.Background()
	tick := time.NewTicker(time.Second / 50)
	defer tick.Stop()
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strconv.Itoa(i), Namespace: "default",
			Labels: map[string]string{admission.LabelInject: admission.InjectSGX}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		start := time.Now()
		if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, time.Since(start))
		if len(pod.Spec.Containers[0].Env) != 2 {
			b.Fatalf("not injected: %+v", pod.Spec.Containers[0])
		}
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(webhookP99Bound(b, admission.PathInjectPod)*1000, "webhook-p99-bound-ms")
}

// webhookP99Bound reads controller-runtime's webhook latency histogram.
func webhookP99Bound(b *testing.B, path string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_latency_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == path }) {
				continue
			}
			h := m.GetHistogram()
			for _, bucket := range h.GetBucket() {
				if float64(bucket.GetCumulativeCount()) >= 0.99*float64(h.GetSampleCount()) {
					return bucket.GetUpperBound()
				}
			}
		}
	}
	b.Fatalf("no latency histogram for %s", path)
	return 0
}
