package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

const testDriver = "test.cloister.dev"

// dirFamily has one device per file of its folder (unhealthy when the
// file says so) and a shared device "pool" of 100 units of "mem".
type dirFamily struct {
	dir string
	mu  sync.Mutex
	// unprepared lists the devices Unprepare was called for.
	unprepared []string
}

func (f *dirFamily) Driver() string       { return testDriver }
func (f *dirFamily) WatchPaths() []string { return []string{f.dir} }
func (f *dirFamily) Scan(context.Context) ([]Device, error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, err
	}
	shared := true
	devs := []Device{{Healthy: true, Device: resourceapi.Device{Name: "pool", AllowMultipleAllocations: &shared,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"mem": {Value: resource.MustParse("100")}}}}}
	for _, e := range entries {
		raw, _ := os.ReadFile(filepath.Join(f.dir, e.Name()))
		devs = append(devs, Device{Device: resourceapi.Device{Name: e.Name(),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: new("file")}}},
			Healthy: !strings.Contains(string(raw), "unhealthy"), Message: strings.TrimSpace(string(raw))})
	}
	return devs, nil
}

func (f *dirFamily) Prepare(_ context.Context, c Claim, a Allocation, _ Device, held []Prepared) (Grant, error) {
	return Grant{
		Edits: cdispec.ContainerEdits{Env: []string{"DEVICE=" + a.Device, fmt.Sprintf("HELD=%d", len(held))},
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/" + a.Device, HostPath: filepath.Join(f.dir, a.Device)}}},
		Data: map[string]string{"claim": c.Name},
	}, nil
}

func (f *dirFamily) Unprepare(_ context.Context, p Prepared, _ []Prepared) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unprepared = append(f.unprepared, p.Claim.Name+"/"+p.Device+"/"+p.Data["claim"])
	return nil
}

type env struct {
	cs      kubernetes.Interface
	fam     *dirFamily
	kubelet string
	cdi     string
	node    string
	cancel  context.CancelFunc
	done    chan error
	drv     *Driver
}

func startDriver(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.drv = &Driver{Family: e.fam, NodeName: e.node, Client: e.cs, KubeletDir: e.kubelet, CDIDir: e.cdi, RescanInterval: time.Hour}
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.drv.Run(ctx) }()
	t.Cleanup(func() { e.stop(t) })
}

func (e *env) stop(t *testing.T) {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	if err := <-e.done; err != nil {
		t.Errorf("driver: %v", err)
	}
}

// kubeletDRA is the kubelet's side of the driver's socket, once it
// registered.
func (e *env) kubeletDRA(t *testing.T) *grpc.ClientConn {
	t.Helper()
	reg := filepath.Join(e.kubelet, "plugins_registry", testDriver+"-reg.sock")
	var info *registerapi.PluginInfo
	waitFor(t, "the driver to register", func() (bool, string) {
		conn, err := grpc.NewClient("unix://"+reg, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = conn.Close() }()
		info, err = registerapi.NewRegistrationClient(conn).GetInfo(context.Background(), &registerapi.InfoRequest{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	waitFor(t, "the driver to wait for the kubelet's word", func() (bool, string) {
		err := e.drv.Ready()
		return err != nil && err.Error() == "the kubelet has not registered the driver yet", fmt.Sprint(err)
	})
	conn, err := grpc.NewClient("unix://"+reg, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	if err := e.drv.Ready(); err != nil {
		t.Errorf("ready once registered: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != testDriver || info.Endpoint != filepath.Join(e.drv.PluginDir(), "dra.sock") {
		t.Fatalf("registration %+v", info)
	}
	conn, err = grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// health follows the driver's health reports as the kubelet does: the
// latest health and message per device.
func health(t *testing.T, conn *grpc.ClientConn) func(device string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := drahealth.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	latest := map[string]string{}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			for _, d := range r.Devices {
				latest[d.Device.DeviceName] = d.Health.String() + " " + d.Message
			}
			mu.Unlock()
		}
	}()
	return func(device string) string {
		mu.Lock()
		defer mu.Unlock()
		return latest[device]
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slice is the node's published devices: name to tainted or not.
func (e *env) slice(t *testing.T) map[string]bool {
	t.Helper()
	list, err := e.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range list.Items {
		if s.Spec.Driver != testDriver || s.Spec.NodeName == nil || *s.Spec.NodeName != e.node || s.Spec.Pool.Name != e.node {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = len(d.Taints) > 0
		}
	}
	return out
}

// allocated creates a claim allocated results, as the scheduler would.
func (e *env) allocated(t *testing.T, name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "test"}}}}}}
	rc, err := e.cs.ResourceV1().ResourceClaims("default").Create(ctx, rc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range results {
		results[i].Request, results[i].Driver, results[i].Pool = "r", testDriver, e.node
	}
	rc.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p-" + name, UID: apitypes.UID("uid-p-" + name)}}
	rc, err = e.cs.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, rc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func prepare(t *testing.T, k drapb.DRAPluginClient, rc *resourceapi.ResourceClaim) (*drapb.NodePrepareResourceResponse, error) {
	t.Helper()
	resp, err := k.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: rc.Namespace, Name: rc.Name, Uid: string(rc.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Claims[string(rc.UID)]
	if r.Error != "" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	return r, nil
}

func unprepare(t *testing.T, k drapb.DRAPluginClient, rc *resourceapi.ResourceClaim) {
	t.Helper()
	resp, err := k.NodeUnprepareResources(context.Background(), &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: rc.Namespace, Name: rc.Name, Uid: string(rc.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.Claims[string(rc.UID)].Error; e != "" {
		t.Fatalf("unprepare %s: %s", rc.Name, e)
	}
}

// The driver against a real API server, its kubelet side over its real
// unix sockets: it registers, publishes the node's devices and follows
// hot plug and health; it prepares claims with a CDI spec each, refuses
// what would hand a device out beyond its capacity, and a restarted
// driver unprepares what its predecessor prepared.
func TestDriver(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	e := &env{cs: cs, fam: &dirFamily{dir: t.TempDir()}, kubelet: t.TempDir(), cdi: t.TempDir(), node: "node-a"}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.fam.dir, "dev-0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	startDriver(t, e)
	conn := e.kubeletDRA(t)
	k := drapb.NewDRAPluginClient(conn)
	healthOf := health(t, conn)
	waitFor(t, "the slice", func() (bool, string) {
		s := e.slice(t)
		return len(s) == 2 && !s["dev-0"] && !s["pool"], fmt.Sprint(s)
	})

	// Hot plug: a device appears, another turns unhealthy.
	start := time.Now()
	if err := os.WriteFile(filepath.Join(e.fam.dir, "dev-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dev-1 in the slice", func() (bool, string) { s := e.slice(t); _, ok := s["dev-1"]; return ok, fmt.Sprint(s) })
	t.Logf("a new device was in the ResourceSlice %v after its file appeared", time.Since(start).Round(time.Millisecond))
	if err := os.WriteFile(filepath.Join(e.fam.dir, "dev-1"), []byte("unhealthy: card offline"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dev-1 tainted", func() (bool, string) { s := e.slice(t); return s["dev-1"], fmt.Sprint(s) })
	waitFor(t, "dev-1 reported unhealthy", func() (bool, string) {
		h := healthOf("dev-1")
		return h == "UNHEALTHY unhealthy: card offline", h
	})
	if h := healthOf("dev-0"); h != "HEALTHY " {
		t.Errorf("dev-0's health: %q", h)
	}

	// An exclusive device goes to one claim; its CDI spec has the edits.
	one := e.allocated(t, "one", resourceapi.DeviceRequestAllocationResult{Device: "dev-0"})
	r, err := prepare(t, k, one)
	if err != nil {
		t.Fatal(err)
	}
	wantID := testDriver + "/claim=" + string(one.UID) + "-dev-0"
	if len(r.Devices) != 1 || !slices.Equal(r.Devices[0].CdiDeviceIds, []string{wantID}) || r.Devices[0].DeviceName != "dev-0" {
		t.Fatalf("prepared %v, want CDI device %s", r.Devices, wantID)
	}
	var spec cdispec.Spec
	raw, err := os.ReadFile(filepath.Join(e.cdi, testDriver+"-"+string(one.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil || spec.Kind != testDriver+"/claim" || len(spec.Devices) != 1 ||
		spec.Devices[0].ContainerEdits.DeviceNodes[0].HostPath != filepath.Join(e.fam.dir, "dev-0") {
		t.Fatalf("CDI spec %s (%v)", raw, err)
	}
	if again, err := prepare(t, k, one); err != nil || again.Devices[0].CdiDeviceIds[0] != wantID {
		t.Errorf("prepared again (a kubelet restart): %v %v", again, err)
	}
	two := e.allocated(t, "two", resourceapi.DeviceRequestAllocationResult{Device: "dev-0"})
	if _, err := prepare(t, k, two); err == nil || !strings.Contains(err.Error(), "device dev-0 is held by claim default/one") {
		t.Errorf("the same exclusive device for a second claim: %v", err)
	}
	sick := e.allocated(t, "sick", resourceapi.DeviceRequestAllocationResult{Device: "dev-1"})
	if _, err := prepare(t, k, sick); err == nil || !strings.Contains(err.Error(), "device dev-1 of request r is unhealthy: unhealthy: card offline") {
		t.Errorf("an unhealthy device: %v", err)
	}

	// A shared device's capacity holds across claims.
	share := func(name, id string, mem string) *resourceapi.ResourceClaim {
		uid := apitypes.UID(id)
		return e.allocated(t, name, resourceapi.DeviceRequestAllocationResult{Device: "pool", ShareID: &uid,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"mem": resource.MustParse(mem)}})
	}
	big := share("big", "11111111-1111-1111-1111-111111111111", "60")
	if _, err := prepare(t, k, big); err != nil {
		t.Fatal(err)
	}
	if _, err := prepare(t, k, share("more", "22222222-2222-2222-2222-222222222222", "60")); err == nil || !strings.Contains(err.Error(), "device pool has 100 of mem; the node's claims would take 120") {
		t.Errorf("over the shared device's capacity: %v", err)
	}
	if _, err := prepare(t, k, share("fits", "33333333-3333-3333-3333-333333333333", "40")); err != nil {
		t.Errorf("within the capacity: %v", err)
	}

	// A restarted driver knows what its predecessor prepared.
	e.stop(t)
	startDriver(t, e)
	conn = e.kubeletDRA(t)
	k = drapb.NewDRAPluginClient(conn)
	healthOf = health(t, conn)
	unprepare(t, k, one)
	unprepare(t, k, one) // again: no error
	if _, err := os.Stat(filepath.Join(e.cdi, testDriver+"-"+string(one.UID)+".json")); !os.IsNotExist(err) {
		t.Errorf("the claim's CDI spec after unprepare: %v", err)
	}
	e.fam.mu.Lock()
	got := slices.Clone(e.fam.unprepared)
	e.fam.mu.Unlock()
	if !slices.Equal(got, []string{"one/dev-0/one"}) {
		t.Errorf("unprepared %v, want one/dev-0 with the data its grant kept", got)
	}
	if _, err := prepare(t, k, two); err != nil {
		t.Errorf("dev-0 once the first claim let go: %v", err)
	}
	if _, err := prepare(t, k, share("still", "44444444-4444-4444-4444-444444444444", "1")); err == nil {
		t.Error("the restarted driver forgot the shared device's consumed capacity")
	}

	// A removed device leaves the slice; the pods of the claim that holds
	// it see it unhealthy.
	start = time.Now()
	for _, dev := range []string{"dev-0", "dev-1"} {
		if err := os.Remove(filepath.Join(e.fam.dir, dev)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "dev-0 and dev-1 gone from the slice", func() (bool, string) { s := e.slice(t); return len(s) == 1, fmt.Sprint(s) })
	t.Logf("removed devices left the ResourceSlice %v after their files went", time.Since(start).Round(time.Millisecond))
	waitFor(t, "the held dev-0 reported unhealthy", func() (bool, string) {
		h := healthOf("dev-0")
		return h == "UNHEALTHY the device is no longer on the node", h
	})
}
