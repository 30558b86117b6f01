//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/realnode"
	nitromode "github.com/cloister-cc/cloister/internal/deviceplugin/nitro"
	sgxmode "github.com/cloister-cc/cloister/internal/deviceplugin/sgx"
)

// setMode switches a device plugin kind's mode and returns when.
func setMode(t *testing.T, e *realNodeEnv, obj client.Object, set func(common.DeviceMode), mode common.DeviceMode) time.Time {
	t.Helper()
	waitFor(t, fmt.Sprintf("%T %s to take mode %s", obj, obj.GetName(), mode), time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error(), nil
		}
		set(mode)
		if err := e.crs.Update(ctx, obj); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	return time.Now()
}

// nodeOffers says whether the real node's allocatable has resource (a
// device plugin's, or a status the SGX plugin sets).
func nodeOffers(ctx context.Context, e *realNodeEnv, name corev1.ResourceName) (bool, string, error) {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
	if err != nil {
		return false, err.Error(), nil
	}
	q, ok := n.Status.Allocatable[name]
	return ok && !q.IsZero(), fmt.Sprintf("allocatable %v", n.Status.Allocatable), nil
}

// The SGXPlugin in DRA mode, on the real node: the operator runs the SGX
// DRA driver instead of the plugin, which publishes the enclave device
// with the node's EPC as capacity and takes the EPC out of the node's
// status. A pod's claim from a template of 1 GiB of EPC runs and its
// container sees exactly the enclave device, at both paths, and its EPC;
// a second claim of 1 GiB (the node has 1.5) stays pending with the
// scheduler's reason until the first pod goes and its claim with it. The
// device unplugged: gone from the ResourceSlice within 2 s, and the
// pod's status shows it unhealthy; back: healthy. In Both, the plugin
// beside the driver offers nothing and a pod's limits still get the
// device by a claim. Back to the device plugin afterwards, for the steps
// after this one.
func testSGXByDRA(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	dumpOnFailure(t, e, "default")
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
	mode := func(m common.DeviceMode) { plugin.Spec.Mode = m }
	since := setMode(t, e, plugin, mode, common.DeviceModeDRA)
	t.Cleanup(func() {
		setMode(t, e, plugin, mode, common.DeviceModeDevicePlugin)
		waitFor(t, "the SGX plugin back with the node's EPC", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
			return nodeOffers(ctx, e, sgxmode.ResourceEPC)
		})
	})
	waitDRADevices(t, e, sgxmode.DRADriver, "the SGX driver's enclave device with the node's EPC", 2*time.Minute, func(d map[string]resourceapi.Device) bool {
		_, provision := d[sgxmode.DeviceProvision]
		return capacityOf(d[sgxmode.DeviceEnclave], sgxmode.CapacityEPC) == realnode.FakeEPCBytes && provision
	})
	t.Logf("SGXPlugin in DRA mode: the enclave device in a ResourceSlice %s after the mode changed", time.Since(since).Round(time.Millisecond))
	waitFor(t, "the EPC to leave the node's status (the driver's capacity now)", time.Minute, func(ctx context.Context) (bool, string, error) {
		has, says, err := nodeOffers(ctx, e, sgxmode.ResourceEPC)
		return !has, says, err
	})

	const class = "sgx-enclave.cloister.dev"
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "enclave-1g", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(class, map[string]string{sgxmode.CapacityEPC: "1Gi"})}}
	second := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "enclave-second", Namespace: "default"},
		Spec: claimSpec(class, map[string]string{sgxmode.CapacityEPC: "1Gi"})}
	createAll(t, e, tmpl, claimPod("default", "dra-enclave-a", tmpl.Name, true))
	first := e.waitPod(t, "default", "dra-enclave-a", "to run", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	pid := containerOf(t, "dra-enclave-a")
	if got := devicesOf(t, pid); !slices.Equal(got, []string{"/dev/sgx/enclave:1:3", "/dev/sgx_enclave:1:3"}) {
		t.Errorf("the claim's container has devices %v, want the enclave device at its two paths only", got)
	}
	if env := containerEnv(pid); !slices.Contains(env, fmt.Sprintf("%s=%d", sgxmode.EnvEPC, 1<<30)) {
		t.Errorf("the container's environment lacks its EPC: %v", env)
	}
	waitFor(t, "the SGXPlugin to count the claim's EPC", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
			return false, err.Error(), nil
		}
		st := plugin.Status
		return st.CapacityEPCBytesPerNode[cluster.RealNodeName] == realnode.FakeEPCBytes && st.UsedEPCBytesPerNode[cluster.RealNodeName] == 1<<30 &&
			st.CapacitySGXDevicesPerNode[cluster.RealNodeName] == 2, fmt.Sprintf("%+v", st), nil
	})

	createAll(t, e, second, claimPod("default", "dra-enclave-b", second.Name, false))
	e.waitPod(t, "default", "dra-enclave-b", "to wait: the node's EPC is taken", time.Minute, unschedulableSaying("cannot allocate all claims"))
	deleteIn(t, e, "default", "dra-enclave-a")
	waitClaimGone(t, e, "default", claimOf(first))
	e.waitPod(t, "default", "dra-enclave-b", "to run once the first claim is released", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	e.waitPod(t, "default", "dra-enclave-b", "to show its device healthy", time.Minute, func(p *corev1.Pod) bool { return deviceHealth(p) == "Healthy" })

	// A pod that asks by its limits, as for the device plugin: the
	// scheduler makes its claim by the DeviceClass's extended resource.
	img, pull := pullNever("cloister-pause")
	byLimits := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dra-enclave-limits", Namespace: "default"},
		Spec: onRealNode(corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: pull, SecurityContext: restricted(),
			Env:       []corev1.EnvVar{{Name: "DRA_POD", Value: "dra-enclave-limits"}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{sgxmode.ResourceEnclave: resource.MustParse("1")}}}}})}
	createAll(t, e, byLimits)
	p := e.waitPod(t, "default", byLimits.Name, "to run by its limits", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if p.Status.ExtendedResourceClaimStatus == nil {
		t.Errorf("the pod asking by its limits ran without a claim made for them: %s", podSummary(p))
	}
	if got := devicesOf(t, containerOf(t, byLimits.Name)); !slices.Equal(got, []string{"/dev/sgx/enclave:1:3", "/dev/sgx_enclave:1:3"}) {
		t.Errorf("the pod asking by its limits has devices %v", got)
	}
	deleteIn(t, e, "default", byLimits.Name)

	back := fakeDeviceGone(t, e, "sgx_enclave")
	took := waitDRADevices(t, e, sgxmode.DRADriver, "the unplugged enclave device to leave the ResourceSlice", 30*time.Second, func(d map[string]resourceapi.Device) bool {
		_, ok := d[sgxmode.DeviceEnclave]
		return !ok
	})
	t.Logf("an unplugged SGX enclave device left the ResourceSlice in %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the unplugged device left the ResourceSlice after %s, want within 2 s", took)
	}
	e.waitPod(t, "default", "dra-enclave-b", "to show its device unhealthy", time.Minute, func(p *corev1.Pod) bool { return deviceHealth(p) == "Unhealthy" })
	back()
	took = waitDRADevices(t, e, sgxmode.DRADriver, "the enclave device plugged back into the ResourceSlice", 30*time.Second, func(d map[string]resourceapi.Device) bool {
		_, ok := d[sgxmode.DeviceEnclave]
		return ok
	})
	t.Logf("an SGX enclave device plugged back was in the ResourceSlice in %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the device plugged back reached the ResourceSlice after %s, want within 2 s", took)
	}
	e.waitPod(t, "default", "dra-enclave-b", "to show its device healthy again", time.Minute, func(p *corev1.Pod) bool { return deviceHealth(p) == "Healthy" })
	deleteIn(t, e, "default", "dra-enclave-b")

	// Both, during a migration: the plugin runs beside the driver and
	// offers nothing; the driver owns the devices, and a pod asking by
	// its limits still gets them by a claim.
	setMode(t, e, plugin, mode, common.DeviceModeBoth)
	waitFor(t, "the plugin and the driver side by side", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=sgx-real"})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == cluster.RealNodeName && len(p.Spec.Containers) == 2 && podReady(&p) && p.DeletionTimestamp == nil {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items)), nil
	})
	if has, says, _ := nodeOffers(ctx, e, sgxmode.ResourceEnclave); has {
		t.Errorf("in Both the device plugin offers devices: %s", says)
	}
	byLimits = byLimits.DeepCopy()
	byLimits.ResourceVersion, byLimits.UID = "", ""
	createAll(t, e, byLimits)
	p = e.waitPod(t, "default", byLimits.Name, "to run by its limits beside the plugin", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if p.Status.ExtendedResourceClaimStatus == nil {
		t.Errorf("in Both a pod asking by its limits was not given a claim: %s", podSummary(p))
	}
	deleteIn(t, e, "default", byLimits.Name)
	for _, o := range []client.Object{second, tmpl} {
		if err := e.crs.Delete(ctx, o); err != nil {
			t.Error(err)
		}
	}
}

// The NitroPlugin in DRA mode: the enclave device's capacity is the
// node's 4 enclave slots, its enclave CPU pool (2 CPUs) and hugepages
// (1 GiB). A claim of 2 CPUs and 512 MiB runs, its container given
// /dev/nitro_enclaves, the pool's CPUs by number and its memory; a claim
// of one more CPU waits, named unschedulable, until the first goes.
func testNitroByDRA(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	dumpOnFailure(t, e, "default")
	plugin := &basev1beta1.NitroPlugin{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
	mode := func(m common.DeviceMode) { plugin.Spec.Mode = m }
	since := setMode(t, e, plugin, mode, common.DeviceModeDRA)
	t.Cleanup(func() { setMode(t, e, plugin, mode, common.DeviceModeDevicePlugin) })
	waitDRADevices(t, e, nitromode.DRADriver, "the Nitro driver's enclave device", 2*time.Minute, func(d map[string]resourceapi.Device) bool {
		dev := d[nitromode.DeviceEnclaves]
		return capacityOf(dev, nitromode.CapacityCPUs) == 2 && capacityOf(dev, nitromode.CapacityMemory) == realnode.FakeHugepages<<21 &&
			capacityOf(dev, nitromode.CapacityEnclaves) == 4
	})
	t.Logf("NitroPlugin in DRA mode: the enclave device in a ResourceSlice %s after the mode changed", time.Since(since).Round(time.Millisecond))

	const class = "nitro-enclave.cloister.dev"
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "enclave-2cpu", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(class, map[string]string{nitromode.CapacityCPUs: "2", nitromode.CapacityMemory: "512Mi"})}}
	more := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "enclave-1cpu", Namespace: "default"},
		Spec: claimSpec(class, map[string]string{nitromode.CapacityCPUs: "1"})}
	createAll(t, e, tmpl, claimPod("default", "dra-nitro-a", tmpl.Name, true))
	first := e.waitPod(t, "default", "dra-nitro-a", "to run", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	pid := containerOf(t, "dra-nitro-a")
	if got := devicesOf(t, pid); !slices.Equal(got, []string{"/dev/nitro_enclaves:1:3"}) {
		t.Errorf("the claim's container has devices %v, want /dev/nitro_enclaves only", got)
	}
	env := containerEnv(pid)
	for _, want := range []string{nitromode.EnvCPUs + "=2,3", nitromode.EnvCPUCount + "=2", nitromode.EnvMemoryMiB + "=512"} {
		if !slices.Contains(env, want) {
			t.Errorf("the enclave's container lacks %s: %v", want, env)
		}
	}
	createAll(t, e, more, claimPod("default", "dra-nitro-b", more.Name, false))
	e.waitPod(t, "default", "dra-nitro-b", "to wait: the enclave CPU pool is taken", time.Minute, unschedulableSaying("cannot allocate all claims"))
	deleteIn(t, e, "default", "dra-nitro-a")
	waitClaimGone(t, e, "default", claimOf(first))
	e.waitPod(t, "default", "dra-nitro-b", "to run once the CPUs are free", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if env := containerEnv(containerOf(t, "dra-nitro-b")); !slices.Contains(env, nitromode.EnvCPUs+"=2") {
		t.Errorf("the second enclave's CPUs: %v", env)
	}
	deleteIn(t, e, "default", "dra-nitro-b")
	for _, o := range []client.Object{more, tmpl} {
		if err := e.crs.Delete(ctx, o); err != nil {
			t.Error(err)
		}
	}
}
