package confidentialruntime

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/controller/controllertest"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// Against a real API server (no kubelet, so no node runs an installer):
// the CR installs the versioned RuntimeClass with its overhead and node
// label and the installer DaemonSet for the node's containerd paths; the
// platform cannot change; deletion first rolls the installers out in
// removal mode, and only then removes the RuntimeClass and the CR.
func TestConfidentialRuntimeLifecycle(t *testing.T) {
	e := controllertest.New(t, envConfig, "ccr-test", appsv1.AddToScheme, nodev1.AddToScheme, rbacv1.AddToScheme, basev1beta1.AddToScheme)
	ctx, c, ns, ev := e.Ctx, e.Client, e.Namespace, e.Events
	data, err := charts.Load("confidentialruntime")
	if err != nil {
		t.Fatal(err)
	}
	r := &service.Reconciler{Client: c, Reader: c, Scheme: e.Scheme, Releases: e.Releases, Recorder: ev,
		Metrics: metrics.NewRecorder(prometheus.NewRegistry()), OperatorNamespace: ns,
		Kind: &Kind{Base: service.Base{Reader: c, ChartData: data, DefaultImage: "example.com/installer:v9"}, Version: "v9"}}

	cr := controllertest.ConfidentialRuntime("sim", "sim", controllertest.WithContainerd("/node/containerd.toml", "/node/containerd.sock"))
	if err := c.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	reconcileN := func(n int) {
		t.Helper()
		for range n {
			if err := e.Reconcile(r, cr, 1); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
		}
	}
	reconcileN(4)
	if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
		t.Fatal(err)
	}
	name := runtimeclass.ClassName(runtimeclass.Sim, "v9")
	// No DaemonSet controller here: the CR stays PENDING on the rollout.
	if i := slices.IndexFunc(cr.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "IsHealthy" }); cr.Status.RuntimeClassName != name ||
		i < 0 || cr.Status.Conditions[i].Reason != "NoNodes" || !strings.Contains(cr.Status.Conditions[i].Message, "insecure, for development only") {
		t.Errorf("status %+v, want runtime class %s and IsHealthy NoNodes, saying sim is insecure", cr.Status, name)
	}
	var rc nodev1.RuntimeClass
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &rc); err != nil {
		t.Fatal(err)
	}
	if rc.Handler != name || rc.Overhead == nil || !rc.Overhead.PodFixed.Memory().Equal(resource.MustParse("256Mi")) ||
		rc.Scheduling == nil || rc.Scheduling.NodeSelector[runtimeclass.NodeLabel(name)] != "true" {
		t.Errorf("runtime class %+v %+v %+v", rc.Handler, rc.Overhead, rc.Scheduling)
	}
	var ds appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ccr-sim"}, &ds); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--platform=sim", "--handler=" + name, "--containerd-config=/node/containerd.toml", "--containerd-socket=/node/containerd.sock"} {
		if !strings.Contains(args, want) {
			t.Errorf("installer args %q lack %s", args, want)
		}
	}
	if strings.Contains(args, "--remove") || len(ds.Spec.Template.Spec.Volumes) != 1 || ds.Spec.Template.Spec.Volumes[0].HostPath.Path != "/node" {
		t.Errorf("installer args %q, volumes %+v: want one mount of /node, installing", args, ds.Spec.Template.Spec.Volumes)
	}

	// The platform is fixed: the update is refused and nothing changes.
	changed := cr.DeepCopy()
	changed.Spec.Platform = "tdx"
	if err := c.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "platform cannot change") {
		t.Errorf("changing the platform: %v", err)
	}

	// Deletion: removal mode first, then the objects go.
	if err := c.Delete(ctx, cr); err != nil {
		t.Fatal(err)
	}
	reconcileN(1)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ccr-sim"}, &ds); err != nil {
		t.Fatalf("the DaemonSet went before the nodes were cleaned: %v", err)
	}
	if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--remove") || ds.Spec.Template.Labels[LabelMode] != ModeRemove {
		t.Errorf("after deletion the installers do not remove: %v %v", ds.Spec.Template.Spec.Containers[0].Args, ds.Spec.Template.Labels)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &rc); err != nil {
		t.Errorf("the RuntimeClass went before the nodes were cleaned: %v", err)
	}
	reconcileN(3)
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &rc); !apierrors.IsNotFound(err) {
		t.Errorf("RuntimeClass after the removal: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cr); !apierrors.IsNotFound(err) {
		t.Errorf("CR after the removal: %v", err)
	}
	if got := ev.Reasons(); !slices.Contains(got, "Draining") || !slices.Contains(got, "Uninstalled") {
		t.Errorf("events %v", got)
	}
}
