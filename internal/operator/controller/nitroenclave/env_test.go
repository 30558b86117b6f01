package nitroenclave

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/operator/controller/controllertest"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

type env struct {
	t  *testing.T
	c  client.Client
	r  *service.Reconciler
	ev *testenv.Events
	ns string
}

func newEnv(t *testing.T, ns string) *env {
	t.Helper()
	e := controllertest.New(t, envConfig, ns, appsv1.AddToScheme, autoscalingv1.AddToScheme, enclavev1beta1.AddToScheme)
	c, ev := e.Client, e.Events
	data, err := charts.Load("nitroenclavedeployment")
	if err != nil {
		t.Fatal(err)
	}
	r := &service.Reconciler{Client: c, Reader: c, Scheme: e.Scheme, Releases: e.Releases, Recorder: ev,
		Metrics: metrics.NewRecorder(prometheus.NewRegistry()), OperatorNamespace: "cloister-system",
		Kind: &Kind{Base: service.Base{Reader: c, ChartData: data, DefaultImage: "example.com/cloister-enclave:v9"}, Events: c}}
	return &env{t: t, c: c, r: r, ev: ev, ns: ns}
}

// reconcile runs n passes; Helm's errors (a refused Deployment) are
// expected on some.
func (e *env) reconcile(n *enclavev1beta1.NitroEnclaveDeployment, passes int) {
	e.t.Helper()
	for range passes {
		_, _ = e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(n)})
	}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(n), n); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
}

func (e *env) deployment(name string) *appsv1.Deployment {
	e.t.Helper()
	var d appsv1.Deployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "ned-" + name}, &d); err != nil {
		e.t.Fatalf("Deployment of %s: %v", name, err)
	}
	return &d
}

func sample(ns, name string) *enclavev1beta1.NitroEnclaveDeployment {
	return controllertest.NitroEnclaveDeployment(ns, name)
}

// Against a real API server (no Deployment controller, no kubelet: the
// test plays the pods): a NED becomes a Deployment of enclave pods on
// Nitro nodes with the manifest beside it, SCHEDULED; a configuration
// change reaches the manifest without touching the pods' template, a boot
// change rolls it; the scale subresource scales; READY and the selector
// come from the pods; deleting the NED removes everything; an idle pass
// writes nothing.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "ned-life")
	n := sample(e.ns, "web")
	if err := e.c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 4)
	if n.Status.Status != enclavev1beta1.DeploymentScheduled || n.Status.Ready != "0/1" || n.Status.Selector == "" {
		t.Fatalf("status %+v", n.Status)
	}
	if e.ev.Count("Scheduled", "Deployment ned-life/ned-web schedules the enclave pods") != 1 || e.ev.Count("Scheduled", "") != 1 {
		t.Errorf("events %v, want one Scheduled", e.ev.All())
	}
	d := e.deployment("web")
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.NodeSelector[tee.LabelNitro] != "true" || c.Resources.Limits.Name(tee.NitroEnclaves, resource.DecimalSI).Value() != 1 ||
		c.Resources.Limits.Name("hugepages-2Mi", resource.BinarySI).Value() != 2048<<20 || c.Image != "example.com/cloister-enclave:v9" ||
		!strings.Contains(strings.Join(c.Args, " "), "--backend=nitro") || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("pod template: %+v", pod)
	}
	if sel, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector); sel.String() != n.Status.Selector {
		t.Errorf("status.selector %q, the Deployment's %q", n.Status.Selector, sel)
	}
	want, _ := manifest.FromSpec(&n.Spec)
	manifest := func() string {
		var cm corev1.ConfigMap
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "ned-web-manifest"}, &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["manifest.json"]
	}
	if n.Status.Manifest != want.ManifestDigest() {
		t.Errorf("status.manifest %q, want the manifest's digest %s", n.Status.Manifest, want.ManifestDigest())
	}
	if got := manifest(); got != string(want.JSON()) {
		t.Errorf("manifest\n%s\nwant\n%s", got, want.JSON())
	}
	boot := d.Spec.Template.Annotations["enclave.cloister.dev/boot-digest"]
	if boot != want.BootDigest() {
		t.Errorf("boot digest annotation %q, want %q", boot, want.BootDigest())
	}

	// Configuration only: the manifest changes, the template does not.
	n.Spec.UserPlugins[0].Env[0].Value = "two"
	if err := e.c.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 3)
	if !strings.Contains(manifest(), `"value":"two"`) || e.deployment("web").Spec.Template.Annotations["enclave.cloister.dev/boot-digest"] != boot {
		t.Errorf("a configuration change: manifest %s, template annotations %v", manifest(), e.deployment("web").Spec.Template.Annotations)
	}
	// What the enclave boots with: the template rolls.
	n.Spec.Enclave.MemoryMiB = 4096
	if err := e.c.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 3)
	if d := e.deployment("web"); d.Spec.Template.Annotations["enclave.cloister.dev/boot-digest"] == boot ||
		d.Spec.Template.Spec.Containers[0].Resources.Limits.Name("hugepages-2Mi", resource.BinarySI).Value() != 4096<<20 {
		t.Errorf("a boot change left the template: %v", d.Spec.Template)
	}

	// kubectl scale: the scale subresource.
	scale := &autoscalingv1.Scale{}
	if err := e.c.SubResource("scale").Get(ctx, n, scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 3
	if err := e.c.SubResource("scale").Update(ctx, n, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 3)
	if r := e.deployment("web").Spec.Replicas; r == nil || *r != 3 {
		t.Fatalf("Deployment replicas %v after scaling to 3", r)
	}
	// The pods, as the Deployment controller and kubelets would make them.
	for i, ready := range []bool{true, true, false} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: fmt.Sprintf("ned-web-%d", i), Labels: e.deployment("web").Spec.Template.Labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "enclave", Image: "x"}}}}
		if err := e.c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}
		if err := e.c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile(n, 2)
	if n.Status.Ready != "2/3" || n.Status.Replicas != 3 || n.Status.ReadyReplicas != 2 {
		t.Errorf("status with 2 of 3 ready: %+v", n.Status)
	}
	if err := e.c.SubResource("scale").Get(ctx, n, scale); err != nil || scale.Status.Replicas != 3 || scale.Status.Selector != n.Status.Selector {
		t.Errorf("scale subresource %+v, %v", scale.Status, err)
	}

	// Idle: nothing to write.
	rv := n.ResourceVersion
	e.reconcile(n, 2)
	if n.ResourceVersion != rv {
		t.Errorf("an idle pass wrote the NED: %s -> %s", rv, n.ResourceVersion)
	}

	// Deletion removes the Deployment and the manifest.
	if err := e.c.Delete(ctx, n); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 3)
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "ned-web"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment after deletion: %v", err)
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(n), n); !apierrors.IsNotFound(err) {
		t.Errorf("NED after deletion: %v", err)
	}
}

// A Deployment the API server refuses: ERROR, with events naming the
// cause; the fixed spec schedules.
func TestError(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "ned-error")
	n := sample(e.ns, "bad")
	n.Spec.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	if err := e.c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 4)
	if n.Status.Status != enclavev1beta1.DeploymentError {
		t.Fatalf("status %+v, want ERROR", n.Status)
	}
	const cause = "must be less than or equal to cpu limit"
	if e.ev.Count("DeploymentFailed", cause) == 0 {
		t.Errorf("no DeploymentFailed event naming the cause; events %v", e.ev.All())
	}
	// Uninstalling the failed release for another attempt keeps ERROR.
	e.reconcile(n, 3)
	if n.Status.Status != enclavev1beta1.DeploymentError {
		t.Errorf("status %q while retrying", n.Status.Status)
	}
	n.Spec.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
	if err := e.c.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	e.reconcile(n, 5)
	if n.Status.Status != enclavev1beta1.DeploymentScheduled || e.ev.Count("Scheduled", "ned-bad") == 0 {
		t.Errorf("fixed spec: status %+v, events %v", n.Status, e.ev.All())
	}
}

// A plugin's environment from the cluster cannot reach an enclave: the
// API server refuses it, naming the field.
func TestValueFromRefused(t *testing.T) {
	e := newEnv(t, "ned-valuefrom")
	n := sample(e.ns, "x")
	n.Spec.UserPlugins[0].Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	if err := e.c.Create(context.Background(), n); err == nil || !strings.Contains(err.Error(), "valueFrom reads the cluster") {
		t.Errorf("valueFrom: %v", err)
	}
}
