//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/deviceplugin/cex"
	"github.com/cloister-cc/cloister/internal/deviceplugin/cex/cexfake"
)

// CryptoExpress by DRA on the real node: s390 Linux's AP bus and zcrypt
// simulated at their lowest layer, in the node's fake sysfs and /dev
// (cexfake), and the CEX DRA driver on the node's host (the CEXPlugin's
// DaemonSet is for s390x nodes; the same binary and flags run here). The
// CEXPlugin in DRA mode ships a DeviceClass per config set; its config set
// "ledger", for namespace payments only, is refused to a claim from
// namespace tenant at admission. In payments, a pod's claim from a
// template selecting mode == "ep11" runs, its container given exactly a
// zcrypt node as /dev/z90crypt and its APQN; a second pod's claim of the
// set waits, named unschedulable, and runs once the first pod and its
// claim (and zcrypt node) are gone. The card pulled: its queues leave the
// ResourceSlice within 2 s and the pod's status shows its device
// unhealthy; a card plugged in is published within 2 s.
func testCEXByDRA(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	dumpOnFailure(t, e, "payments")
	k := cexfake.NewIn(t, e.node.SysDir(), e.node.DevicesDir(), true)
	t.Cleanup(func() {
		for _, d := range []string{"devices/ap", "class/zcrypt", "devices/virtual/zcrypt"} {
			_ = os.RemoveAll(filepath.Join(e.node.SysDir(), d))
		}
	})
	k.Card(0x05, "CEX8P", 0x12, 0x13)
	k.Card(0x06, "CEX8C", 0x12)
	for _, ns := range []string{"payments", "tenant"} {
		createAll(t, e, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	plugin := &basev1beta1.CEXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "real-cex"}, Spec: basev1beta1.CEXPluginSpec{
		ServiceSpec: common.ServiceSpec{ImagePullPolicy: corev1.PullIfNotPresent}, Mode: common.DeviceModeDRA,
		ConfigSets: []basev1beta1.CryptoConfigSet{
			{Name: "ledger", APQNs: []basev1beta1.APQN{{Adapter: 5, Domain: 0x12}}, Namespaces: []string{"payments"}},
			{Name: "cca", APQNs: []basev1beta1.APQN{{Adapter: 6, Domain: 0x12}}},
		}}}
	createAll(t, e, plugin)
	t.Cleanup(func() { _ = e.crs.Delete(context.Background(), plugin) })
	waitFor(t, "the CEXPlugin's release to ship the config set's DeviceClass", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.ResourceV1().DeviceClasses().Get(ctx, "cex-set-ledger.cloister.dev", metav1.GetOptions{})
		return err == nil, "no class", nil
	})

	sets := filepath.Join(e.dir, "cex-config-sets.json")
	cfg := `{"configSets":[{"name":"ledger","apqns":[{"adapter":5,"domain":18}]},{"name":"cca","apqns":[{"adapter":6,"domain":18}]}]}`
	if err := os.WriteFile(sets, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	driverCtx, stop := context.WithCancel(ctx)
	log := &testenv.Buffer{}
	cmd := exec.CommandContext(driverCtx, filepath.Join(e.bin, "cloister-device-plugin"), "dra", "cex",
		"--dev-root", e.node.DevicesDir(), "--sys-root", e.node.SysDir(), "--kubelet-dir", e.node.KubeletRootDir(), "--cdi-dir", e.node.CDIDir(),
		"--config-sets", sets, "--metrics-address", "")
	cmd.Env = append(os.Environ(), "NODE_NAME=real", "KUBECONFIG="+e.c.KubeconfigPath())
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the CEX DRA driver's log:\n%s", log)
		}
	})
	waitDRADevices(t, e, cex.DRADriver, "the CEX driver's config sets' queues", time.Minute, func(d map[string]resourceapi.Device) bool {
		ledger, cca := d["apqn-05-0012"], d["apqn-06-0012"]
		_, unlisted := d["apqn-05-0013"]
		return ledger.Attributes[cex.AttrConfigSet].StringValue != nil && *ledger.Attributes[cex.AttrConfigSet].StringValue == "ledger" &&
			cca.Attributes[cex.AttrMode].StringValue != nil && *cca.Attributes[cex.AttrMode].StringValue == "cca" && !unlisted
	})

	const class = "cex-set-ledger.cloister.dev"
	ep11 := `device.attributes["cex.cloister.dev"].mode == "ep11"`
	// The policy takes effect once the API server's informers have the
	// CEXPlugin, its parameter.
	waitFor(t, "a claim of config set ledger from namespace tenant to be refused", time.Minute, func(ctx context.Context) (bool, string, error) {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "hsm", Namespace: "tenant"}, Spec: claimSpec(class, nil, ep11)}
		err := e.crs.Create(ctx, c)
		if err == nil {
			_ = e.crs.Delete(ctx, c)
			return false, "created", nil
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "namespace tenant may not claim CryptoExpress queues of config set ledger"), err.Error(), nil
	})

	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "hsm", Namespace: "payments"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(class, nil, ep11)}}
	second := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "hsm-second", Namespace: "payments"}, Spec: claimSpec(class, nil, ep11)}
	createAll(t, e, tmpl, claimPod("payments", "dra-cex-a", tmpl.Name, true))
	first := e.waitPod(t, "payments", "dra-cex-a", "to run", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	pid := containerOf(t, "dra-cex-a")
	if got := devicesOf(t, pid); !slices.Equal(got, []string{"/dev/z90crypt:1:3"}) {
		t.Errorf("the claim's container has devices %v, want its zcrypt node as /dev/z90crypt only", got)
	}
	if env := containerEnv(pid); !slices.Contains(env, "CEX_APQN=05.0012") || !slices.Contains(env, "CEX_TYPE=ep11") {
		t.Errorf("the container's environment: %v", env)
	}
	node := "devices/virtual/zcrypt/zcrypt_apqn_5_18/"
	if ap, aq := k.Read(node+"apmask"), k.Read(node+"aqmask"); ap != cex.Mask(5) || aq != cex.Mask(0x12) {
		t.Errorf("the zcrypt node's masks %s %s, want adapter 5 and domain 18 only", ap, aq)
	}
	createAll(t, e, second, claimPod("payments", "dra-cex-b", second.Name, false))
	e.waitPod(t, "payments", "dra-cex-b", "to wait: the set's one queue is taken", time.Minute, unschedulableSaying("cannot allocate all claims"))
	deleteIn(t, e, "payments", "dra-cex-a")
	waitClaimGone(t, e, "payments", claimOf(first))
	k.WantDestroyed(t, "zcrypt_apqn_5_18", "the released claim's")
	e.waitPod(t, "payments", "dra-cex-b", "to run once the queue is free", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	e.waitPod(t, "payments", "dra-cex-b", "to show its device healthy", time.Minute, func(p *corev1.Pod) bool { return deviceHealth(p) == "Healthy" })

	start := time.Now()
	k.Unplug(0x05)
	took := waitDRADevices(t, e, cex.DRADriver, "the pulled card's queue to leave the ResourceSlice", 30*time.Second, func(d map[string]resourceapi.Device) bool {
		_, ok := d["apqn-05-0012"]
		return !ok
	})
	t.Logf("a pulled CryptoExpress card's queue left the ResourceSlice in %s", time.Since(start).Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the pulled card's queue left the ResourceSlice after %s, want within 2 s", took)
	}
	e.waitPod(t, "payments", "dra-cex-b", "to show its device unhealthy", time.Minute, func(p *corev1.Pod) bool { return deviceHealth(p) == "Unhealthy" })
	k.Card(0x05, "CEX8P", 0x12)
	took = waitDRADevices(t, e, cex.DRADriver, "a card plugged in to reach the ResourceSlice", 30*time.Second, func(d map[string]resourceapi.Device) bool {
		dev, ok := d["apqn-05-0012"]
		return ok && len(dev.Taints) == 0
	})
	t.Logf("a CryptoExpress card plugged in reached the ResourceSlice in %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the card plugged in reached the ResourceSlice after %s, want within 2 s", took)
	}
	deleteIn(t, e, "payments", "dra-cex-b")
	for _, o := range []client.Object{second, tmpl} {
		if err := e.crs.Delete(ctx, o); err != nil {
			t.Error(err)
		}
	}
	if strings.Contains(log.String(), `"level":"ERROR"`) {
		t.Errorf("the driver logged errors:\n%s", log)
	}
}
