//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	"github.com/cloister-cc/cloister/internal/workload/imagepin"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/nodeinstaller"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

const shopPods = `# Three tiers of a shop (web -> api -> db) and a cart of two replicas,
# plain YAML marked confidential; api (by Contrast's annotation), db and
# the cart share one workload secret, web has its own.
apiVersion: v1
kind: Service
metadata: {name: shop-web, namespace: default}
spec:
  selector: {app: shop-web}
  ports: [{port: 443}]
---
apiVersion: v1
kind: Pod
metadata: {name: shop-web, namespace: default, labels: {app: shop-web}}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  hostAliases: [{ip: CAS_IP, hostnames: [cas-shop.default.svc]}]
  containers:
  - name: web
    image: PAUSE
    resources: {limits: {memory: 32Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: shop-api, namespace: default, labels: {app: shop-api}, annotations: {contrast.edgeless.systems/workload-secret-id: shop/orders}}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  hostAliases: [{ip: CAS_IP, hostnames: [cas-shop.default.svc]}]
  containers:
  - name: api
    image: PAUSE
    resources: {limits: {memory: 32Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: shop-db, namespace: default, labels: {app: shop-db}, annotations: {cloister.dev/workload-secret-id: shop/orders}}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  hostAliases: [{ip: CAS_IP, hostnames: [cas-shop.default.svc]}]
  containers:
  - name: db
    image: PAUSE
    resources: {limits: {memory: 32Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: shop-cart, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: shop-cart}}
  template:
    metadata: {labels: {app: shop-cart}, annotations: {cloister.dev/workload-secret-id: shop/orders}}
    spec:
      runtimeClassName: cloister-cc
      nodeSelector: {NODE_LABEL: "true"}
      hostAliases: [{ip: CAS_IP, hostnames: [cas-shop.default.svc]}]
      containers:
      - name: cart
        image: PAUSE
        resources: {limits: {memory: 32Mi}}
`

// workloadSecrets are the workload secrets of the running shop pods, by
// pod name: each read from its own pause container's view of its
// in-memory volume (its HOSTNAME names the pod).
func workloadSecrets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range liveProcessesMentioning("cloister-pause") {
		pid, _, _ := strings.Cut(line, ":")
		env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		if err != nil {
			continue
		}
		for _, v := range strings.Split(string(env), "\x00") {
			if name, ok := strings.CutPrefix(v, "HOSTNAME="); ok && strings.HasPrefix(name, "shop-") {
				if data, err := os.ReadFile(filepath.Join("/proc", pid, "root", initenv.DefaultOut, "files"+generate.WorkloadSecretFile)); err == nil {
					out[name] = string(data)
				}
			}
		}
	}
	return out
}

// checkWorkloadSecrets: api, db and both cart replicas name one id and
// share its secret; web, by its own (default) id, has another.
func checkWorkloadSecrets(t *testing.T, when string) string {
	t.Helper()
	secrets := workloadSecrets(t)
	var cart []string
	for name := range secrets {
		if strings.HasPrefix(name, "shop-cart-") {
			cart = append(cart, name)
		}
	}
	orders := secrets["shop-api"]
	if len(cart) != 2 || len(orders) != 64 || len(secrets["shop-web"]) != 64 {
		t.Fatalf("%s: workload secrets of %v", when, slices.Sorted(maps.Keys(secrets)))
	}
	for _, name := range append(cart, "shop-db") {
		if secrets[name] != orders {
			t.Errorf("%s: %s has another workload secret than shop-api, though both name shop/orders", when, name)
		}
	}
	if secrets["shop-web"] == orders {
		t.Errorf("%s: shop-web, by its own id, has shop/orders's workload secret", when)
	}
	return orders
}

// Plain YAML made confidential on the real node: a ConfidentialRuntime
// puts its handler into the node's containerd (restarting it) and labels
// the node → generate (images pinned from the digest cache, offline)
// names its RuntimeClass → apply → the pods wait in their initializers →
// set → they start with certificates of the mesh CA; verify writes the
// manifest; a pod whose image differs from its policy gets no evidence
// from LAS, and says why. Deleting the ConfidentialRuntime takes the
// handler and the label off the node again.
//
// Then the owner's journey: an update signed by another key is refused,
// the owner's is accepted and shows in verify's history; CAS restarts
// (on its volume), new pods wait, `cloister recover` unseals CAS, they
// start, and verify shows the same history. A manifest without owners
// cannot be changed at all.
func testConfidentialWorkloads(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	runtimeClass := installSimRuntime(t, e)
	casCR := simCAS("cas-shop")
	casCR.Spec.Persistence.Enabled = true
	// The owners recover it after a restart (the seed sealed per node is
	// tested with the CAS kind's own flows).
	casCR.Spec.Sealing = servicesv1beta1.CASSealingNone
	if err := e.crs.Create(ctx, casCR); err != nil {
		t.Fatal(err)
	}
	casPod := e.waitPod(t, "default", conn.PodName("cas-shop"), "to run on the real node", 2*time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
	})
	waitLASPinned(t, e, "cas-shop")
	at := []string{"--cluster", "default/cas-shop", "--insecure-simulated-cas"}
	ws, resources := filepath.Join(e.dir, "shop-workspace"), filepath.Join(e.dir, "shop-resources")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(resources, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := writeDigestCache(t, e, ws)
	yaml := strings.NewReplacer("NODE_LABEL", cluster.LabelRealNode, "CAS_IP", casPod.Status.PodIP, "PAUSE", imageRef("cloister-pause")).Replace(shopPods)
	if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	generateShop := func() {
		e.mustCLI(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t, e, "cas-shop"), "--offline", "--workspace", ws, "--policy", "workloads",
			"--cas-address", "cas-shop.default.svc:8081", "--initializer-image", imageRef("cloister-initializer"), resources)
	}
	generateShop()
	// generate names the runtime class the operator of its version installs.
	if generated, _ := os.ReadFile(filepath.Join(resources, "shop.yaml")); strings.Count(string(generated), "runtimeClassName: "+runtimeClass) != 4 {
		t.Fatalf("generate did not name the installed runtime class %s:\n%s", runtimeClass, generated)
	}
	e.applyFile(t, filepath.Join(resources, "shop.yaml"))

	// No manifest yet: the pods wait in their initializers, which say so.
	shop := []string{"shop-web", "shop-api", "shop-db"}
	for _, name := range shop {
		e.waitPod(t, "default", name, "to wait in its initializer", 2*time.Minute, func(p *corev1.Pod) bool {
			return len(p.Status.InitContainerStatuses) > 0 && p.Status.InitContainerStatuses[0].State.Running != nil
		})
	}
	waitFor(t, "the initializer to say why it waits", time.Minute, func(ctx context.Context) (bool, string, error) {
		out, _ := kubectl(t, e.c, "logs", "-n", "default", "shop-web", "-c", generate.InitializerName)
		return strings.Contains(out, "not attested yet"), out, nil
	})

	out := e.mustCLI(t, append(append([]string{"set"}, at...), "--workspace", ws, resources)...)
	if !strings.Contains(out, "manifest workloads set: version 1") {
		t.Errorf("set: %s", out)
	}
	for _, name := range shop {
		e.waitPod(t, "default", name, "to run once the manifest is set", 2*time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning
		})
	}
	waitCartRunning(t, e)
	orders := checkWorkloadSecrets(t, "version 1")
	meshCA, err := os.ReadFile(filepath.Join(ws, "mesh-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := podFiles(t, initenv.DefaultOut, casclient.CertChainFile, casclient.MeshCAFile, "files"+generate.WorkloadSecretFile)
	// Whichever of the pods the files are from: its certificate
	// names it and its Service's DNS names, from the mesh CA.
	leaf := verifyChain(t, files[casclient.CertChainFile], meshCA, "")
	dns := map[string]string{"default-pod-shop-web.workloads": "shop-web.default.svc", "default-pod-shop-api.workloads": "shop-api.default",
		"default-pod-shop-db.workloads": "shop-db.default", "default-deployment-shop-cart.workloads": "shop-cart.default"}[leaf.Subject.CommonName]
	if dns == "" || !slices.Contains(leaf.DNSNames, dns) {
		t.Errorf("certificate %s with DNS names %v", leaf.Subject, leaf.DNSNames)
	}
	if secret := files["files"+generate.WorkloadSecretFile]; len(secret) != 64 {
		t.Errorf("the workload secret %q", secret)
	}
	t.Logf("a shop pod started with %s (%v), issued by %s", leaf.Subject, leaf.DNSNames, leaf.Issuer)

	out = e.mustCLI(t, append(append([]string{"verify"}, at...), "--workspace", ws, resources)...)
	if !strings.Contains(out, "manifest workloads version 1") || !strings.Contains(out, "4 pod policies") {
		t.Errorf("verify: %s", out)
	}
	manifest, _ := os.ReadFile(filepath.Join(ws, generate.ManifestFile))
	if got, _ := os.ReadFile(filepath.Join(ws, "verify", "manifest.0.yaml")); string(got) != string(manifest) {
		t.Error("verify/manifest.0.yaml is not the manifest set")
	}

	// The same policy annotation on a pod running another image: LAS
	// vouches for no policy it does not run.
	web, err := e.cs.CoreV1().Pods("default").Get(ctx, "shop-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "shop-web-changed", Namespace: "default", Annotations: web.Annotations}, Spec: *web.Spec.DeepCopy()}
	changed.Spec.NodeName = ""
	changed.Spec.Containers[0].Image = cache[imageRef("cloister")]
	if _, err := e.cs.CoreV1().Pods("default").Create(ctx, changed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the changed pod's initializer to say why it gets no certificate", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		out, _ := kubectl(t, e.c, "logs", "-n", "default", "shop-web-changed", "-c", generate.InitializerName)
		return strings.Contains(out, "does not run what its policy annotation says") && strings.Contains(out, "containers[0] (web): image"), out, nil
	})
	for _, name := range append(shop, "shop-web-changed") {
		if err := e.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	deleteCart(t, e)

	// The api tier changes: another key cannot set it, the owner can.
	yaml = strings.Replace(yaml, "  - name: api\n    image: "+imageRef("cloister-pause")+"\n",
		"  - name: api\n    image: "+imageRef("cloister-pause")+"\n    env: [{name: TIER_VERSION, value: \"2\"}]\n", 1)
	if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	generateShop()
	other := filepath.Join(e.dir, "other-owner.pem")
	e.mustCLI(t, "policy", "keygen", "--out", other)
	if _, err := e.cli(append(append([]string{"set"}, at...), "--workspace", ws, "--workload-owner-key", other, resources)...); err == nil ||
		!strings.Contains(err.Error(), "is not among the keys that may approve version 2") {
		t.Errorf("an update signed by another key: %v", err)
	}
	if out := e.mustCLI(t, append(append([]string{"set"}, at...), "--workspace", ws, resources)...); !strings.Contains(out, "version 2") {
		t.Errorf("the owner's update: %s", out)
	}
	verifyHistory := func(when string) {
		out := e.mustCLI(t, append(append([]string{"verify"}, at...), "--workspace", ws, resources)...)
		v1, _ := os.ReadFile(filepath.Join(ws, "verify", "manifest.0.yaml"))
		v2, _ := os.ReadFile(filepath.Join(ws, "verify", "manifest.1.yaml"))
		if !strings.Contains(out, "manifest workloads version 2") || !strings.Contains(out, "2 versions") || string(v1) != string(manifest) {
			t.Errorf("verify %s: %s", when, out)
		}
		if now, _ := os.ReadFile(filepath.Join(ws, generate.ManifestFile)); string(v2) != string(now) {
			t.Errorf("verify %s: manifest.1.yaml is not the manifest set", when)
		}
	}
	verifyHistory("after the update")
	auditOffline(t, e, casCR, append(append([]string{}, at...), "--workspace", ws, resources))

	// CAS restarts on its volume: it waits for recovery, and so do new pods.
	waitFor(t, "the shop's pods to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		err := e.crs.List(ctx, &pods, client.InNamespace("default"))
		left := []string{}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "shop-") {
				left = append(left, p.Name)
			}
		}
		return err == nil && len(left) == 0, fmt.Sprint(left, err), nil
	})
	old := casPod
	if err := e.cs.CoreV1().Pods("default").Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	casPod = e.waitPod(t, "default", old.Name, "to run again", 2*time.Minute, func(p *corev1.Pod) bool {
		return p.UID != old.UID && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
	})
	waitCondition(t, e.crs, casCR, health.IsHealthy, health.ReasonCASRecovery)
	// The CAS address is not part of the pods' policies: only where they
	// find it changes (this cluster has no DNS for Services).
	e.applyFile(t, writeFile(t, filepath.Join(e.dir, "shop-after-restart.yaml"),
		strings.ReplaceAll(mustRead(t, filepath.Join(resources, "shop.yaml")), "ip: "+old.Status.PodIP, "ip: "+casPod.Status.PodIP)))
	waitFor(t, "a new pod's initializer to say CAS waits for recovery", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		out, _ := kubectl(t, e.c, "logs", "-n", "default", "shop-api", "-c", generate.InitializerName)
		return strings.Contains(out, "recovery mode"), out, nil
	})
	if out := e.mustCLI(t, append(append([]string{"recover"}, at...), "--workspace", ws)...); !strings.Contains(out, "CAS is ready") {
		t.Errorf("recover: %s", out)
	}
	for _, name := range shop {
		e.waitPod(t, "default", name, "to run once CAS is recovered", 2*time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning
		})
	}
	waitCartRunning(t, e)
	// Version 2 kept the ids, and CAS derives the secrets from its
	// recovered seed: new pods of it get the secrets version 1's had.
	if checkWorkloadSecrets(t, "version 2, after the recovery") != orders {
		t.Error("version 2 kept the workload secret id, yet its pods got another workload secret after CAS's recovery")
	}
	verifyHistory("after the recovery")

	// A manifest generated without owner keys is set once and never changed.
	// Its workloads are other services than the shop's: a certificate name
	// belongs to the one policy that holds it.
	frozenWS, frozenRes := filepath.Join(e.dir, "frozen-workspace"), filepath.Join(e.dir, "frozen-resources")
	if err := os.MkdirAll(frozenWS, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(frozenRes, 0o755); err != nil {
		t.Fatal(err)
	}
	writeDigestCache(t, e, frozenWS)
	generateFrozen := func(tierVersion string) {
		writeFile(t, filepath.Join(frozenRes, "shop.yaml"), strings.ReplaceAll(strings.Replace(yaml, `value: "2"`, `value: "`+tierVersion+`"`, 1), "shop-", "frozen-"))
		e.mustCLI(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t, e, "cas-shop"), "--offline", "--workspace", frozenWS, "--policy", "frozen", "--disable-updates",
			"--cas-address", "cas-shop.default.svc:8081", "--initializer-image", imageRef("cloister-initializer"), frozenRes)
	}
	generateFrozen("2")
	// Its name is new: the board (the shop workspace's seed share owner,
	// which initialised CAS) approves it, and nobody else could.
	if _, err := e.cli(append(append([]string{"set"}, at...), "--workspace", frozenWS, frozenRes)...); err == nil || !strings.Contains(err.Error(), "is a new name") {
		t.Errorf("a new manifest name without the board: %v", err)
	}
	frozenSet := append(append([]string{"set"}, at...), "--workspace", frozenWS, "--board-key", filepath.Join(ws, generate.SeedShareOwnerFile), frozenRes)
	if out := e.mustCLI(t, frozenSet...); !strings.Contains(out, "manifest frozen set: version 1") {
		t.Errorf("set an immutable manifest: %s", out)
	}
	generateFrozen("3")
	if _, err := e.cli(frozenSet...); err == nil || !strings.Contains(err.Error(), "has no owners, so version 1 cannot be changed") {
		t.Errorf("changing an immutable manifest: %v", err)
	}
	for _, name := range shop {
		if err := e.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	deleteCart(t, e)
	t.Run("ServiceMesh", func(t *testing.T) { testServiceMesh(t, e, casPod.Status.PodIP) })
	removeSimRuntime(t, e, runtimeClass)
}

// waitCartRunning waits for both replicas of the cart to run.
func waitCartRunning(t *testing.T, e *realNodeEnv) {
	t.Helper()
	waitFor(t, "both replicas of shop-cart to run", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := e.crs.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"app": "shop-cart"}); err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running == 2, fmt.Sprintf("%d of %d running", running, len(pods.Items)), nil
	})
}

// deleteCart deletes the cart's Deployment, and with it its pods.
func deleteCart(t *testing.T, e *realNodeEnv) {
	t.Helper()
	fg := metav1.DeletePropagationForeground
	if err := e.cs.AppsV1().Deployments("default").Delete(context.Background(), "shop-cart", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// installSimRuntime installs the sim ConfidentialRuntime on the real node
// and returns its RuntimeClass, checking that containerd's CRI serves the
// handler and the node carries the label the RuntimeClass schedules onto.
func installSimRuntime(t *testing.T, e *realNodeEnv) string {
	ctx := context.Background()
	ccr := &basev1beta1.ConfidentialRuntime{ObjectMeta: metav1.ObjectMeta{Name: "sim"}, Spec: basev1beta1.ConfidentialRuntimeSpec{
		ServiceSpec: common.ServiceSpec{ImagePullPolicy: corev1.PullNever, NodeSelector: common.NodeSelector{cluster.LabelRealNode: "true"}},
		Platform:    "sim", Overhead: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		ContainerdConfig: e.node.ContainerdConfig(), ContainerdSocket: e.node.ContainerdSocket(),
	}}
	start := time.Now()
	if err := e.crs.Create(ctx, ccr); err != nil {
		t.Fatal(err)
	}
	waitState(t, e.crs, ccr, common.StateHealthy)
	t.Logf("ConfidentialRuntime HEALTHY in %s (containerd restarted on the node)", time.Since(start).Round(time.Millisecond))
	name := ccr.Status.RuntimeClassName
	node := ccr.Status.Nodes[e.node.Name]
	if ccr.Status.NumberInstalled != 1 || node.State != basev1beta1.RuntimeNodeInstalled || name != runtimeclass.ClassName(runtimeclass.Sim, imageVersion) {
		t.Errorf("status %+v", ccr.Status)
	}
	ctrd := &nodeinstaller.Containerd{ConfigPath: e.node.ContainerdConfig(), Socket: e.node.ContainerdSocket(), Timeout: 10 * time.Second}
	if has, err := ctrd.Has(ctx, name); err != nil || !has {
		t.Errorf("containerd serves handler %s: %v %v", name, has, err)
	}
	n, err := e.cs.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{})
	if err != nil || n.Labels[runtimeclass.NodeLabel(name)] != "true" {
		t.Errorf("node labels %v %v", n.Labels, err)
	}
	rc, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	if err != nil || rc.Handler != name || !rc.Overhead.PodFixed.Memory().Equal(resource.MustParse("64Mi")) {
		t.Fatalf("runtime class %+v %v", rc, err)
	}
	return name
}

// removeSimRuntime deletes the ConfidentialRuntime: the label and the
// handler leave the node before the RuntimeClass goes.
func removeSimRuntime(t *testing.T, e *realNodeEnv, name string) {
	ctx := context.Background()
	ccr := &basev1beta1.ConfidentialRuntime{ObjectMeta: metav1.ObjectMeta{Name: "sim"}}
	if err := e.crs.Delete(ctx, ccr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ConfidentialRuntime to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		err := e.crs.Get(ctx, client.ObjectKeyFromObject(ccr), ccr)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v %+v", err, ccr.Status.Nodes), nil
	})
	ctrd := &nodeinstaller.Containerd{ConfigPath: e.node.ContainerdConfig(), Socket: e.node.ContainerdSocket(), Timeout: 10 * time.Second}
	if has, err := ctrd.Has(ctx, name); err != nil || has {
		t.Errorf("after removal containerd serves handler %s: %v %v", name, has, err)
	}
	if n, err := e.cs.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{}); err != nil || n.Labels[runtimeclass.NodeLabel(name)] != "" {
		t.Errorf("node labels after removal %v %v", n.Labels, err)
	}
	if _, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("runtime class after removal: %v", err)
	}
}

// writeDigestCache pins the images in generate's workspace ws: they are
// on the node, not in a registry, so the digest cache names them, as a
// rerun of generate would find it.
func writeDigestCache(t *testing.T, e *realNodeEnv, ws string) map[string]string {
	t.Helper()
	cache := map[string]string{}
	for _, b := range e.built {
		cache[b.Ref] = strings.TrimSuffix(b.Ref, ":"+imageVersion) + "@" + b.Digest
	}
	data, _ := json.Marshal(cache)
	if err := os.WriteFile(filepath.Join(ws, generate.DigestCacheFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Their configurations too, by both ways the images are pinned: the
	// agent's policy then pins what each runs.
	configs := &imagepin.Configs{Cache: filepath.Join(ws, generate.ConfigCacheFile)}
	for _, b := range e.built {
		file, err := b.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{cache[b.Ref], b.Pinned()} {
			if err := configs.Put(ref, file); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := configs.Save(); err != nil {
		t.Fatal(err)
	}
	return cache
}

// auditOffline writes an auditor bundle of the workspace's manifest from
// the dev cluster's CAS and re-checks it where no cluster is: no
// kubeconfig, no home, and as root a network namespace of its own (no
// route anywhere); a byte changed in it fails the claim it touches.
func auditOffline(t *testing.T, e *realNodeEnv, casCR *servicesv1beta1.CAS, verifyArgs []string) {
	t.Helper()
	bundle := filepath.Join(e.dir, "audit.json")
	out := e.mustCLI(t, append([]string{"verify", "--bundle", bundle}, verifyArgs...)...)
	if !strings.Contains(out, "auditor bundle written to "+bundle) {
		t.Fatalf("verify --bundle: %s", out)
	}
	if err := e.crs.Get(context.Background(), client.ObjectKeyFromObject(casCR), casCR); err != nil {
		t.Fatal(err)
	}
	simKey := filepath.Join(e.dir, "cas-shop-sim.pem")
	if err := os.WriteFile(simKey, []byte(casCR.Status.SimulationKey), 0o600); err != nil {
		t.Fatal(err)
	}
	offline := func() (string, error) {
		args := []string{filepath.Join(e.bin, "cloister"), "verify", "--offline", bundle, "--insecure-simulated-cas", "--cas-sim-key", simKey}
		if unshare, err := exec.LookPath("unshare"); err == nil && os.Geteuid() == 0 {
			args = append([]string{unshare, "--net", "--"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		return buf.String(), err
	}
	out, err := offline()
	if err != nil || !strings.Contains(out, "PASS cas-statement") || !strings.Contains(out, "PASS log-inclusion v2") || !strings.Contains(out, "PASS consistency") {
		t.Fatalf("the bundle offline: %v\n%s", err, out)
	}
	t.Logf("the auditor bundle re-checked offline:\n%s", out)
	raw, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte(`"proofs":["`)) + len(`"proofs":["`) + 40
	raw[i] ^= 1
	if err := os.WriteFile(bundle, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := offline(); err == nil || !strings.Contains(out, "FAIL ") {
		t.Errorf("a byte changed in the bundle: %v\n%s", err, out)
	}
}
