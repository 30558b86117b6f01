//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/proc"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/las/lasclient"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// BenchmarkCASInCluster is the in-cluster CAS on the real node (warm
// images): a CAS resource from apply to serving (the CR says it waits for
// init), a SignedPolicy from kubectl apply to HEALTHY (goal 2 s), then
// attestations as workloads make them (evidence from the node's LAS, then
// CAS at its pod; the load runs on the host, reaching both at their pod
// addresses), with the CAS process's CPU per attestation.
func BenchmarkCASInCluster(b *testing.B) {
	e := startRealNodeEnv(b)
	ctx := context.Background()
	startRealLAS(b, e)

	start := time.Now()
	cas := simCAS("cas")
	if err := e.crs.Create(ctx, cas); err != nil {
		b.Fatal(err)
	}
	waitCondition(b, e.crs, cas, health.IsHealthy, health.ReasonCASUninitialized)
	serving := time.Since(start)

	work = &casWork{dir: filepath.Join(e.dir, "cas")}
	if err := os.MkdirAll(work.dir, 0o700); err != nil {
		b.Fatal(err)
	}
	rec := filepath.Join(work.dir, "r.pem")
	if err := os.WriteFile(rec+".pub", []byte(e.mustCLI(b, "policy", "keygen", "--out", rec)), 0o644); err != nil {
		b.Fatal(err)
	}
	e.mustCLI(b, "cas", "init", "--cluster", "default/cas", "--insecure-simulated-cas", "--recovery-owner", rec+".pub", "--out", filepath.Join(work.dir, "shares.json"))
	work.recoveryKeys = []string{rec} // the board too: it approves the policy's name
	waitState(b, e.crs, cas, common.StateHealthy)

	work.owner = filepath.Join(work.dir, "owner.pem")
	work.ownerPub = e.mustCLI(b, "policy", "keygen", "--out", work.owner)
	file := e.signPolicy(b, "shop", policyDoc(work.ownerPub, "24h"), work.owner, "")
	start = time.Now()
	e.applyFile(b, file)
	sp := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "default"}}
	waitState(b, e.crs, sp, common.StateHealthy)
	registered := time.Since(start)

	cl := attestedPod(b, e, cas, conn.PodName("cas"))
	lasAt := lasOnHost(b, e)
	waitLASPinned(b, e, "cas")
	casPID := 0
	for _, line := range liveProcessesMentioning("--state-dir=/etc/cas/db") {
		pid, _, _ := strings.Cut(line, ":")
		casPID, _ = strconv.Atoi(pid)
	}
	if casPID == 0 {
		b.Fatal("no cloister-cas process on the host")
	}
	cpuBefore, err := proc.CPU(casPID)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	p99 := attestLoad(b, []*casclient.Client{cl}, lasAt)
	b.StopTimer()
	cpuAfter, _ := proc.CPU(casPID)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attestations/s")
	b.ReportMetric(p99, "p99-ms")
	// After the timer's reset, which drops metrics reported before it.
	b.ReportMetric(serving.Seconds(), "cas-apply-to-serving-s")
	b.ReportMetric(float64(registered.Milliseconds()), "policy-apply-to-healthy-ms")
	b.ReportMetric(float64((cpuAfter-cpuBefore).Microseconds())/float64(b.N), "cas-cpu-µs/attestation")
}

// attestRequest is a workload's request: a key, a CSR, and LAS's evidence
// binding the key.
func attestRequest(b *testing.B, las *lasclient.Client) *wire.AttestRequest {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	binding, _ := wire.KeyBinding(&key.PublicKey)
	ev, err := las.Quote(context.Background(), binding)
	if err != nil {
		b.Error(err)
	}
	return &wire.AttestRequest{Policy: "default/shop", Service: "web", Evidence: ev,
		CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})}
}

// attestedPod is a client attested to the CAS replica in pod.
func attestedPod(b *testing.B, e *realNodeEnv, cas *servicesv1beta1.CAS, pod string) *casclient.Client {
	b.Helper()
	p, err := e.cs.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cl, _, err := casclient.NewAttested(context.Background(), conn.Ref{Namespace: "default", Name: cas.Name, Port: 8081}.URL(),
		conn.Expect(cas), conn.DialTo(p.Status.PodIP+":8081"))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// attestLoad makes b.N attestations, 4 at a time per CPU, spread over the
// clients (one per CAS replica), and returns their 99th percentile in ms.
func attestLoad(b *testing.B, clients []*casclient.Client, las *lasclient.Client) float64 {
	var failed, next atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		cl := clients[int(next.Add(1))%len(clients)]
		var mine []time.Duration
		for pb.Next() {
			req := attestRequest(b, las)
			start := time.Now()
			if _, err := cl.AttestRaw(context.Background(), req); err != nil {
				if failed.Add(1) == 1 {
					b.Error(err)
				}
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
	})
	if len(took) == 0 {
		return 0
	}
	slices.Sort(took)
	return float64(took[(len(took)*99)/100].Microseconds()) / 1000
}

// BenchmarkCASReplicas is attestations at 1 and at 3 replicas of one CAS on
// the real node (the load on the host, spread over the replicas): their
// rate and 99th percentile.
func BenchmarkCASReplicas(b *testing.B) {
	e := startRealNodeEnv(b)
	ctx := context.Background()
	startRealLAS(b, e)
	cas := simCAS("cas")
	if err := e.crs.Create(ctx, cas); err != nil {
		b.Fatal(err)
	}
	waitCondition(b, e.crs, cas, health.IsHealthy, health.ReasonCASUninitialized)
	work = &casWork{dir: filepath.Join(e.dir, "cas")}
	if err := os.MkdirAll(work.dir, 0o700); err != nil {
		b.Fatal(err)
	}
	rec := filepath.Join(work.dir, "r.pem")
	if err := os.WriteFile(rec+".pub", []byte(e.mustCLI(b, "policy", "keygen", "--out", rec)), 0o644); err != nil {
		b.Fatal(err)
	}
	e.mustCLI(b, "cas", "init", "--cluster", "default/cas", "--insecure-simulated-cas", "--recovery-owner", rec+".pub", "--out", filepath.Join(work.dir, "shares.json"))
	work.recoveryKeys = []string{rec}
	waitState(b, e.crs, cas, common.StateHealthy)
	work.owner = filepath.Join(work.dir, "owner.pem")
	work.ownerPub = e.mustCLI(b, "policy", "keygen", "--out", work.owner)
	e.mustCLI(b, "cas", "register", e.signPolicy(b, "shop", policyDoc(work.ownerPub, "24h"), work.owner, ""), "--cluster", "default/cas", "--insecure-simulated-cas")
	lasAt := lasOnHost(b, e)
	waitLASPinned(b, e, "cas")
	for _, n := range []int32{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			if err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), cas); err != nil {
				b.Fatal(err)
			}
			if cas.Spec.Replicas != n {
				cas.Spec.Replicas = n
				if err := e.crs.Update(ctx, cas); err != nil {
					b.Fatal(err)
				}
			}
			var clients []*casclient.Client
			for _, p := range conn.PodNames("cas", n) {
				e.waitPod(b, "default", p, "to be ready", 3*time.Minute, podReady)
				clients = append(clients, attestedPod(b, e, cas, p))
			}
			b.ResetTimer()
			p99 := attestLoad(b, clients, lasAt)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attestations/s")
			b.ReportMetric(p99, "p99-ms")
		})
	}
}

// startRealLAS runs the SGX plugin and a simulated LAS on the real node
// and waits for the LAS to be HEALTHY.
func startRealLAS(b *testing.B, e *realNodeEnv) {
	b.Helper()
	real := common.NodeSelector{cluster.LabelRealNode: "true"}
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "real"},
		Spec: basev1beta1.SGXPluginSpec{ServiceSpec: common.ServiceSpec{ImagePullPolicy: corev1.PullIfNotPresent, NodeSelector: real}}}
	las := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: "real"},
		Spec: basev1beta1.LASSpec{HostPort: 18766, Simulation: true, ServiceSpec: common.ServiceSpec{ImagePullPolicy: corev1.PullIfNotPresent, NodeSelector: real}}}
	for _, o := range []serviceCR{plugin, las} {
		if err := e.crs.Create(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
	waitState(b, e.crs, las, common.StateHealthy)
}

// lasOnHost is the real node's LAS as the host reaches it: at its pod
// (hostPorts are DNAT rules for traffic from pods and other machines, not
// for the node's own).
func lasOnHost(b testing.TB, e *realNodeEnv) *lasclient.Client {
	b.Helper()
	var lasIP string
	waitFor(b, "the LAS pod ready", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-las"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err, pods), nil
		}
		lasIP = pods.Items[0].Status.PodIP
		return podReady(&pods.Items[0]) && lasIP != "", podSummary(&pods.Items[0]), nil
	})
	return &lasclient.Client{URL: "http://" + lasIP + ":18766"}
}
