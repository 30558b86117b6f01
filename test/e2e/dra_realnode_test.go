//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/internal/dev/cluster"
)

// draDevices are the real node's devices of driver as its ResourceSlices
// publish them, by name.
func draDevices(ctx context.Context, e *realNodeEnv, driver string) (map[string]resourceapi.Device, error) {
	list, err := e.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		if s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == cluster.RealNodeName {
			for _, d := range s.Spec.Devices {
				out[d.Name] = d
			}
		}
	}
	return out, nil
}

// waitDRADevices waits until cond holds of the real node's devices of
// driver and returns how long that took.
func waitDRADevices(t *testing.T, e *realNodeEnv, driver, what string, timeout time.Duration, cond func(map[string]resourceapi.Device) bool) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, what, timeout, func(ctx context.Context) (bool, string, error) {
		devs, err := draDevices(ctx, e, driver)
		if err != nil {
			return false, err.Error(), nil
		}
		names := make([]string, 0, len(devs))
		for n, d := range devs {
			names = append(names, fmt.Sprintf("%s%v", n, d.Taints))
		}
		slices.Sort(names)
		return cond(devs), "devices " + strings.Join(names, " "), nil
	})
	return time.Since(start)
}

// capacityOf is a device's capacity of name, in its units; -1 without.
func capacityOf(d resourceapi.Device, name string) int64 {
	c, ok := d.Capacity[resourceapi.QualifiedName(name)]
	if !ok {
		return -1
	}
	return c.Value.Value()
}

// claimSpec asks for one device of class, with capacity requests and CEL
// selectors.
func claimSpec(class string, capacity map[string]string, selectors ...string) resourceapi.ResourceClaimSpec {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	if len(capacity) > 0 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for k, v := range capacity {
			req.Capacity.Requests[resourceapi.QualifiedName(k)] = resource.MustParse(v)
		}
	}
	for _, s := range selectors {
		req.Selectors = append(req.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: req}}}}
}

// claimPod is a pod on the real node whose one container (marked by
// DRA_POD=name in its environment, to find it from the host) holds the
// claim: a ResourceClaim's name, or a template's with fromTemplate.
func claimPod(ns, name, claim string, fromTemplate bool) *corev1.Pod {
	img, pull := pullNever("cloister-pause")
	rc := corev1.PodResourceClaim{Name: "dev", ResourceClaimName: &claim}
	if fromTemplate {
		rc = corev1.PodResourceClaim{Name: "dev", ResourceClaimTemplateName: &claim}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: onRealNode(corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{rc}, Containers: []corev1.Container{{
			Name: "c", Image: img, ImagePullPolicy: pull, SecurityContext: restricted(),
			Env:       []corev1.EnvVar{{Name: "DRA_POD", Value: name}},
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
		}}}),
	}
}

// containerOf is the host pid of the container DRA_POD=name marks.
func containerOf(t *testing.T, name string) string {
	t.Helper()
	for _, line := range liveProcessesMentioning("cloister-pause") {
		pid, _, _ := strings.Cut(line, ":")
		if slices.Contains(containerEnv(pid), "DRA_POD="+name) {
			return pid
		}
	}
	t.Fatalf("no container of pod %s", name)
	return ""
}

func containerEnv(pid string) []string {
	b, _ := os.ReadFile(filepath.Join("/proc", pid, "environ"))
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// devicesOf lists the device nodes of a container's /dev, beyond those
// every container has, as path:major:minor.
func devicesOf(t *testing.T, pid string) []string {
	t.Helper()
	standard := []string{"/dev/full", "/dev/null", "/dev/random", "/dev/tty", "/dev/urandom", "/dev/zero", "/dev/ptmx", "/dev/pts/ptmx"}
	var out []string
	root := filepath.Join("/proc", pid, "root")
	err := filepath.WalkDir(filepath.Join(root, "dev"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path, root)
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || slices.Contains(standard, rel) {
			return nil
		}
		out = append(out, fmt.Sprintf("%s:%d:%d", rel, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// unschedulableSaying says whether the scheduler gave up on the pod for
// a reason that says says.
func unschedulableSaying(says string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, says) {
				return true
			}
		}
		return false
	}
}

// deviceHealth is what the pod's status says of its claim's devices'
// health (KEP-4680): "Healthy", "Unhealthy" or "Unknown", one per device.
func deviceHealth(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.ContainerStatuses {
		for _, r := range c.AllocatedResourcesStatus {
			if strings.HasPrefix(string(r.Name), "claim:") {
				for _, h := range r.Resources {
					out = append(out, string(h.Health))
				}
			}
		}
	}
	return strings.Join(out, ",")
}

// claimOf is the ResourceClaim the pod's claim "dev" resolved to.
func claimOf(p *corev1.Pod) string {
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == "dev" && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

func createAll(t *testing.T, e *realNodeEnv, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := e.crs.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// deleteIn deletes a pod at once and waits until it is gone.
func deleteIn(t *testing.T, e *realNodeEnv, ns, name string) {
	t.Helper()
	if err := e.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+ns+"/"+name+" to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, "still there", nil
	})
}

// waitClaimGone waits until the claim a pod's template made is deleted
// with its pod: released.
func waitClaimGone(t *testing.T, e *realNodeEnv, ns, name string) {
	t.Helper()
	waitFor(t, "claim "+ns+"/"+name+" to be released and deleted", time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, "still there", nil
	})
}

// fakeDeviceGone takes one of the real node's fake device nodes away
// (as a hot unplug would) and returns what puts it back.
func fakeDeviceGone(t *testing.T, e *realNodeEnv, name string) func() {
	t.Helper()
	path := filepath.Join(e.node.DevicesDir(), name)
	if err := os.Rename(path, path+".gone"); err != nil {
		t.Fatal(err)
	}
	back := func() {
		if _, err := os.Stat(path + ".gone"); err == nil {
			if err := os.Rename(path+".gone", path); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(back)
	return back
}

// dumpOnFailure logs, when t fails, what explains a pod that did not run
// under DRA: the pods and claims of namespaces, the slices, the device
// classes, and the DRA drivers' logs.
func dumpOnFailure(t *testing.T, e *realNodeEnv, namespaces ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, ns := range namespaces {
			for _, what := range []string{"pods", "resourceclaims"} {
				out, _ := kubectl(t, e.c, "describe", what, "-n", ns)
				t.Logf("%s in %s:\n%s", what, ns, out)
			}
		}
		out, _ := kubectl(t, e.c, "get", "resourceslices,deviceclasses", "-o", "yaml")
		t.Logf("slices and classes:\n%s", out)
		out, _ = kubectl(t, e.c, "logs", "-n", operatorNamespace, "-l", "app.kubernetes.io/component=device-plugin", "--all-containers", "--tail=50")
		t.Logf("the drivers' logs:\n%s", out)
	})
}
