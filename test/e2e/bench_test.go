//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/dev/cluster"
)

// BenchmarkDevUp measures `cloister dev up` on a warm toolchain cache: from
// nothing to a control plane with every node Ready. Tear-down is not timed.
func BenchmarkDevUp(b *testing.B) {
	for _, nodes := range []int{3, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c := newCluster(b, fmt.Sprintf("bench-%d", nodes))
				b.Cleanup(func() {
					if _, err := c.Down(context.Background()); err != nil {
						b.Error(err)
					}
					if err := os.RemoveAll(c.Workdir); err != nil {
						b.Fatal(err)
					}
				})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				b.StartTimer()
				_, err := c.Up(ctx, nodes)
				b.StopTimer()
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Down(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRealNodeUp measures `cloister dev up --real-node` on a warm
// cache (toolchain and images built, not timed): from nothing to a
// Cloister pod Running on the real node, with a control plane of one
// simulated node. It reports the resident memory of the whole cluster
// (control plane, kubelet, containerd, shims, the pods) then, as
// cluster-MB. As root only.
func BenchmarkRealNodeUp(b *testing.B) {
	nodeTools, _, _ := prepareRealNode(b)
	b.ResetTimer()
	var rss int64
	var controlPlane, realNode, pod time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := newCluster(b, "bench-real")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		b.StartTimer()
		start := time.Now()
		if _, err := c.Up(ctx, 1); err != nil {
			b.Fatal(err)
		}
		controlPlane += time.Since(start)
		start = time.Now()
		_, err := c.UpRealNode(ctx, nodeTools)
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := c.RESTConfig()
		if err != nil {
			b.Fatal(err)
		}
		realNode += time.Since(start)
		start = time.Now()
		cs := kubernetes.NewForConfigOrDie(cfg)
		las := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "las", Namespace: "default"},
			Spec: onRealNode(corev1.PodSpec{Containers: []corev1.Container{{Name: "las", Image: imageRef("cloister-las"),
				ImagePullPolicy: corev1.PullNever, Args: []string{"--simulation"}, SecurityContext: restricted()}}}),
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, las, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "las", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		})
		b.StopTimer()
		pod += time.Since(start)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		node, _ := c.RealNode(cluster.RealNodeTools{})
		rss = residentBytes(c.Workdir, node.Dir, "/usr/local/bin/cloister")
		if _, err := c.Down(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(c.Workdir); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rss)/(1<<20), "cluster-MB")
	b.ReportMetric(controlPlane.Seconds()/float64(b.N), "control-plane-s")
	b.ReportMetric(realNode.Seconds()/float64(b.N), "real-node-s")
	b.ReportMetric(pod.Seconds()/float64(b.N), "pod-running-s")
}

// residentBytes sums VmRSS of the live processes whose command line
// mentions any of marks.
func residentBytes(marks ...string) int64 {
	var total int64
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || e.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		if !slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(string(cmdline), m) }) {
			continue
		}
		status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				total += kb * 1024
			}
		}
	}
	return total
}
