package sgx_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/deviceplugin/kubelettest"
	"github.com/cloister-cc/cloister/internal/deviceplugin/nodelabel"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
)

type rig struct {
	dev     string
	kubelet *kubelettest.Kubelet
}

// start serves the sgx mode over a fake /dev holding the given device
// files, to a fake kubelet.
func start(tb testing.TB, capacity int, labeler nodelabel.Labeler, files ...string) *rig {
	tb.Helper()
	r := &rig{dev: tb.TempDir()}
	for _, f := range files {
		touch(tb, filepath.Join(r.dev, f))
	}
	mode := &sgxmode.Mode{DevRoot: r.dev, Capacity: capacity, Label: &nodelabel.Presence{Labeler: labeler, Key: sgxmode.Label}}
	if err := mode.Validate(); err != nil {
		tb.Fatal(err)
	}
	r.kubelet, _ = kubelettest.Serve(tb, mode, time.Hour)
	return r
}

func touch(tb testing.TB, path string) {
	tb.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// summary renders what kubelet was last told about resource: "3 Healthy".
func (r *rig) summary(resource string) string {
	devs, ok := r.kubelet.Devices(resource)
	if !ok {
		return "not listed"
	}
	health := map[string]int{}
	for _, d := range devs {
		health[d.Health]++
	}
	var parts []string
	for h, n := range health {
		parts = append(parts, fmt.Sprintf("%d %s", n, h))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func (r *rig) want(t *testing.T, enclave, provision string) {
	t.Helper()
	if _, ok := r.kubelet.WaitFor(2*time.Second, func() bool {
		return r.summary(sgxmode.ResourceEnclave) == enclave && r.summary(sgxmode.ResourceProvision) == provision
	}); !ok {
		t.Fatalf("after 2 s kubelet sees enclave %q provision %q, want %q %q",
			r.summary(sgxmode.ResourceEnclave), r.summary(sgxmode.ResourceProvision), enclave, provision)
	}
}

func TestRegistersBothResourcesWithCapacity(t *testing.T) {
	r := start(t, 7, nil, "sgx_enclave", "sgx_provision")
	r.want(t, "7 Healthy", "7 Healthy")
	var names []string
	for _, reg := range r.kubelet.Registrations() {
		names = append(names, reg.ResourceName)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{sgxmode.ResourceEnclave, sgxmode.ResourceProvision}) {
		t.Errorf("registered %v", names)
	}
}

func TestAllocateMapsTheDeviceNode(t *testing.T) {
	r := start(t, 3, nil, "sgx_enclave", "sgx_provision")
	r.want(t, "3 Healthy", "3 Healthy")
	for _, tc := range []struct{ resource, file string }{
		{sgxmode.ResourceEnclave, "sgx_enclave"}, {sgxmode.ResourceProvision, "sgx_provision"},
	} {
		resp, err := r.kubelet.Client(tc.resource).Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{tc.file + "-0", tc.file + "-2"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range resp.ContainerResponses[0].Devices {
			got = append(got, d.HostPath+"->"+d.ContainerPath+":"+d.Permissions)
		}
		host := filepath.Join(r.dev, tc.file)
		want := []string{host + "->/dev/" + tc.file + ":rw", host + "->/dev/sgx/" + strings.TrimPrefix(tc.file, "sgx_") + ":rw"}
		if !slices.Equal(got, want) {
			t.Errorf("%s: devices %v, want %v", tc.resource, got, want)
		}
	}
}

func TestDeviceRemovedAndBrokenReachKubelet(t *testing.T) {
	r := start(t, 2, nil, "sgx_enclave", "sgx_provision")
	r.want(t, "2 Healthy", "2 Healthy")

	if err := os.Remove(filepath.Join(r.dev, "sgx_provision")); err != nil {
		t.Fatal(err)
	}
	r.want(t, "2 Healthy", "0")

	// A node that exists but cannot be opened (a directory cannot be
	// opened for writing, even by root) is unhealthy.
	if err := os.Remove(filepath.Join(r.dev, "sgx_enclave")); err != nil {
		t.Fatal(err)
	}
	r.want(t, "0", "0")
	if err := os.Mkdir(filepath.Join(r.dev, "sgx_enclave"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.want(t, "2 Unhealthy", "0")
	if err := os.Remove(filepath.Join(r.dev, "sgx_enclave")); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(r.dev, "sgx_enclave"))
	r.want(t, "2 Healthy", "0")
}

func TestLabelsItsNodeWhileSGXExists(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(testenv.Start(t, testenv.Options{}))
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sgx-0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	label := func() string {
		n, err := cs.CoreV1().Nodes().Get(ctx, "sgx-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[sgxmode.Label]
	}
	waitLabel := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for label() != want {
			if time.Now().After(deadline) {
				t.Fatalf("label %s = %q, want %q", sgxmode.Label, label(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	r := start(t, 1, &nodelabel.Node{Client: cs, Name: "sgx-0"}, "sgx_enclave")
	waitLabel("true")
	if err := os.Remove(filepath.Join(r.dev, "sgx_enclave")); err != nil {
		t.Fatal(err)
	}
	waitLabel("")
	touch(t, filepath.Join(r.dev, "sgx_enclave"))
	waitLabel("true")
}

func TestCapacityOutOfRange(t *testing.T) {
	for _, c := range []int{0, -1, 10001} {
		err := (&sgxmode.Mode{Capacity: c}).Validate()
		if err == nil || !strings.Contains(err.Error(), "--capacity") || !strings.Contains(err.Error(), "between 1 and 10000") {
			t.Errorf("capacity %d: %v", c, err)
		}
	}
	for _, c := range []int{1, 110, 10000} {
		if err := (&sgxmode.Mode{Capacity: c}).Validate(); err != nil {
			t.Errorf("capacity %d refused: %v", c, err)
		}
	}
}

// BenchmarkAllocate measures kubelet's Allocate round trip over the unix
// socket and reports p50/p99.
func BenchmarkAllocate(b *testing.B) {
	r := start(b, 110, nil, "sgx_enclave", "sgx_provision")
	if _, ok := r.kubelet.WaitFor(5*time.Second, func() bool { return r.summary(sgxmode.ResourceEnclave) == "110 Healthy" }); !ok {
		b.Fatal("plugin not listed")
	}
	c := r.kubelet.Client(sgxmode.ResourceEnclave)
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"sgx_enclave-5"}}}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := c.Allocate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	kubelettest.ReportPercentiles(b, lat)
}

// The node's EPC is the sum of its NUMA nodes' sgx_total_bytes (a fake
// sysfs), offered while the enclave device exists and withdrawn when it
// goes; a malformed size changes nothing.
func TestEPC(t *testing.T) {
	dev, sys := t.TempDir(), t.TempDir()
	for node, size := range map[string]string{"node0": "33554432\n", "node1": "67108864\n"} {
		dir := filepath.Join(sys, "devices", "system", "node", node, "x86")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "sgx_total_bytes"), []byte(size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := sgxmode.ReadEPC(sys); err != nil || n != 96<<20 {
		t.Fatalf("ReadEPC = %d, %v; want %d", n, err, 96<<20)
	}
	if n, err := sgxmode.ReadEPC(t.TempDir()); err != nil || n != 0 {
		t.Errorf("no sysfs files: %d %v", n, err)
	}
	set := &capacities{}
	m := &sgxmode.Mode{DevRoot: dev, Capacity: 1, SysRoot: sys, EPC: &nodelabel.Capacity{Setter: set, Name: sgxmode.ResourceEPC}}
	scan := func() {
		t.Helper()
		if _, err := m.Scan(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	scan()
	if got := set.last(); got != "none" {
		t.Errorf("without the device: %s", got)
	}
	touch(t, filepath.Join(dev, "sgx_enclave"))
	scan()
	if got := set.last(); got != "96Mi" {
		t.Errorf("with the device: %s, want 96Mi", got)
	}
	if err := os.WriteFile(filepath.Join(sys, "devices", "system", "node", "node1", "x86", "sgx_total_bytes"), []byte("lots"), 0o600); err != nil {
		t.Fatal(err)
	}
	scan()
	if got, n := set.last(), len(set.values); got != "96Mi" || n != 2 {
		t.Errorf("a malformed size: %s after %d patches", got, n)
	}
	if err := os.Remove(filepath.Join(dev, "sgx_enclave")); err != nil {
		t.Fatal(err)
	}
	scan()
	if got := set.last(); got != "none" {
		t.Errorf("the device gone: %s", got)
	}
}

// capacities records what a Capacity set.
type capacities struct{ values []string }

func (c *capacities) SetCapacity(_ context.Context, _ string, v *resource.Quantity) error {
	if v == nil {
		c.values = append(c.values, "none")
	} else {
		c.values = append(c.values, v.String())
	}
	return nil
}

func (c *capacities) last() string {
	if len(c.values) == 0 {
		return "none"
	}
	return c.values[len(c.values)-1]
}
