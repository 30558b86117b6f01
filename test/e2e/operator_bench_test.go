//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/operator"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/controller/sgxplugin"
)

// benchOperator brings up a cluster of n nodes with the CRDs and a running
// operator, all removed when b ends.
func benchOperator(b *testing.B, n int) (*cluster.Cluster, kubernetes.Interface, client.Client, *operatorProcess) {
	b.Helper()
	c := newCluster(b, fmt.Sprintf("bench-op-%d", n))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.Up(ctx, n); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := c.Down(context.Background()); err != nil {
			b.Error(err)
		}
		if err := os.RemoveAll(c.Workdir); err != nil {
			b.Fatal(err)
		}
	})
	cfg, err := c.RESTConfig()
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)
	installCRDs(b, c, cs)
	scheme, err := operator.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	crs, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	op := newOperator(b, c)
	op.start(b)
	b.Cleanup(func() { _ = op.signal(syscall.SIGKILL) })
	return c, cs, crs, op
}

// pollUntil checks cond every 10 ms: benchmarks want the latency, not the
// poll interval.
func pollUntil(b *testing.B, what string, cond func(ctx context.Context) (bool, string, error)) {
	b.Helper()
	poll(b, what, 10*time.Millisecond, 5*time.Minute, cond)
}

// BenchmarkSamplesToHealthy is the time from `kubectl apply` of the SGXPlugin
// and LAS samples to both being HEALTHY on a 3-node cluster (goal: 5 s).
func BenchmarkSamplesToHealthy(b *testing.B) {
	c, cs, crs, _ := benchOperator(b, 3)
	ctx := context.Background()
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "sgxplugin-sample"}}
		las := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: "las-sample"}}
		b.StartTimer()
		if out, err := kubectl(b, c, "apply", "-f", "config/samples/base_v1beta1_sgxplugin.yaml", "-f", "config/samples/base_v1beta1_las.yaml"); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		pollUntil(b, "SGXPlugin HEALTHY", inState(crs, plugin, common.StateHealthy))
		pollUntil(b, "LAS HEALTHY", inState(crs, las, common.StateHealthy))
		b.StopTimer()
		if err := crs.Delete(ctx, plugin); err != nil {
			b.Fatal(err)
		}
		if err := crs.Delete(ctx, las); err != nil {
			b.Fatal(err)
		}
		// Gone, pods included: the next LAS needs the host port.
		pollUntil(b, "the samples and their pods to be gone", func(ctx context.Context) (bool, string, error) {
			pods, err := cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: service.LabelOwnerKind})
			if err != nil {
				return false, err.Error(), nil
			}
			errP := crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin)
			errL := crs.Get(ctx, client.ObjectKeyFromObject(las), las)
			return len(pods.Items) == 0 && apierrors.IsNotFound(errP) && apierrors.IsNotFound(errL),
				fmt.Sprintf("%d pods, SGXPlugin: %v, LAS: %v", len(pods.Items), errP, errL), nil
		})
	}
}

// BenchmarkAllocatableChange1000Nodes is, on 1,000 simulated nodes with the
// SGX plugin on every one, the time from a change of an SGX node's
// allocatable enclave devices to the SGXPlugin status showing it (goal:
// 10 s), and the operator's peak RSS (goal: 150 MiB).
func BenchmarkAllocatableChange1000Nodes(b *testing.B) { benchAllocatableChange(b, 1000) }

// BenchmarkAllocatableChange5000Nodes is the same on 5,000 nodes (goals:
// 1 s, 250 MiB peak RSS, no API request while idle).
func BenchmarkAllocatableChange5000Nodes(b *testing.B) { benchAllocatableChange(b, 5000) }

func benchAllocatableChange(b *testing.B, nodes int) {
	c, cs, crs, op := benchOperator(b, nodes)
	if out, err := kubectl(b, c, "apply", "-f", "config/samples/base_v1beta1_sgxplugin.yaml"); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "sgxplugin-sample"}}
	start := time.Now()
	pollUntil(b, fmt.Sprintf("SGXPlugin HEALTHY on %d nodes", nodes), inState(crs, plugin, common.StateHealthy))
	b.Logf("SGXPlugin HEALTHY on %d nodes %s after apply (desired %d ready %d, %d SGX nodes)", nodes,
		time.Since(start).Round(time.Millisecond), plugin.Status.DesiredReplicas, plugin.Status.ReadyReplicas,
		len(plugin.Status.CapacitySGXDevicesPerNode))
	ctx := context.Background()
	sgxNodes := nodes / 5
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		node := fmt.Sprintf("sgx-%d", 5*(i%sgxNodes))
		want := int32(50 + i%50)
		patch := fmt.Sprintf(`{"status":{"allocatable":{%q:"%d"}}}`, sgxplugin.ResourceEnclave, want)
		if _, err := cs.CoreV1().Nodes().PatchStatus(ctx, node, []byte(patch)); err != nil {
			b.Fatal(err)
		}
		pollUntil(b, "the status to show "+node+"'s new allocatable", func(ctx context.Context) (bool, string, error) {
			if err := crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
				return false, err.Error(), nil
			}
			got := plugin.Status.CapacitySGXDevicesPerNode[node]
			return got == want, fmt.Sprintf("capacity %d", got), nil
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(op.peakRSS(b))/(1<<20), "peak-RSS-MiB")
	// Idle: nodes send heartbeats, nothing changes that the status shows.
	time.Sleep(5 * time.Second)
	before := op.apiRequests(b)
	time.Sleep(10 * time.Second)
	after := op.apiRequests(b)
	idle := 0.0
	for method, n := range after {
		idle += n - before[method]
	}
	b.ReportMetric(idle, "idle-requests/10s")
}

// BenchmarkNEDScheduled is the time from creating a NitroEnclaveDeployment
// to SCHEDULED (goal: 1 s), reported beside the time to READY 1/1 on a
// simulated Nitro node (kwok reports the pod ready as it is bound).
func BenchmarkNEDScheduled(b *testing.B) {
	_, _, crs, _ := benchOperator(b, 5)
	ctx := context.Background()
	var toReady time.Duration
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		ned := &enclavev1beta1.NitroEnclaveDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bench-%d", i)},
			Spec: enclavev1beta1.NitroEnclaveDeploymentSpec{UserPlugins: []enclavev1beta1.UserPlugin{{Name: "app", Image: "registry.example/app:1", Command: []string{"/app"}}}}}
		start := time.Now()
		b.StartTimer()
		if err := crs.Create(ctx, ned); err != nil {
			b.Fatal(err)
		}
		pollUntil(b, "SCHEDULED", func(ctx context.Context) (bool, string, error) {
			err := crs.Get(ctx, client.ObjectKeyFromObject(ned), ned)
			return err == nil && ned.Status.Status == enclavev1beta1.DeploymentScheduled, fmt.Sprint(err, ned.Status.Status), nil
		})
		b.StopTimer()
		pollUntil(b, "READY 1/1", func(ctx context.Context) (bool, string, error) {
			err := crs.Get(ctx, client.ObjectKeyFromObject(ned), ned)
			return err == nil && ned.Status.Ready == "1/1", fmt.Sprint(err, ned.Status.Ready), nil
		})
		toReady += time.Since(start)
		if err := crs.Delete(ctx, ned); err != nil {
			b.Fatal(err)
		}
		pollUntil(b, "the NED to be gone", func(ctx context.Context) (bool, string, error) {
			err := crs.Get(ctx, client.ObjectKeyFromObject(ned), ned)
			return apierrors.IsNotFound(err), fmt.Sprint(err), nil
		})
	}
	b.ReportMetric(toReady.Seconds()/float64(b.N), "s-to-ready/op")
}
