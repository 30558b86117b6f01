package release

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// A real API server, the embedded LAS chart, and a ConfigMap standing in
// for the owning CR (no garbage collector runs in envtest).
func setup(t *testing.T) (*Manager, kubernetes.Interface, Request) {
	t.Helper()
	cfg := testenv.Start(t, testenv.Options{})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner, err := cs.CoreV1().ConfigMaps("ops").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := charts.Load("las")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	return m, cs, Request{
		Name: "las-test", Namespace: "ops", Chart: ch,
		Values: map[string]any{"image": "example.com/las:1", "hostPort": 18766},
		Owner: metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID,
			Controller: &yes, BlockOwnerDeletion: &yes},
		Labels: map[string]string{"cloister.dev/owner": "test"},
	}
}

func mustObserve(t *testing.T, m *Manager, req Request) *Snapshot {
	t.Helper()
	obs, err := m.Observe(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// specChanged: any object of the deployed revision Changed, or only in
// one of the two renderings.
func specChanged(obs *Snapshot) bool {
	byName := func(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			m[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
		}
		return m
	}
	desired, deployed := byName(obs.Desired), byName(obs.DeployedObjects)
	for k, d := range desired {
		if Changed(d, deployed[k]) {
			return true
		}
	}
	return len(desired) != len(deployed)
}

// revision is the number of the release's latest revision.
func revision(t *testing.T, m *Manager, req Request) int {
	t.Helper()
	_, rel := latestOf(t, m, req)
	return rel.Version
}

// latestOf is the release's latest revision and its Helm configuration.
func latestOf(t *testing.T, m *Manager, req Request) (*action.Configuration, *helmrelease.Release) {
	t.Helper()
	cfg, err := m.actionConfig(req.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := m.latest(cfg, req.Name)
	if err != nil || rel == nil {
		t.Fatalf("latest revision of %s: %v %v", req.Name, rel, err)
	}
	return cfg, rel
}

func want(t *testing.T, what string, got health.Observation, status string) {
	t.Helper()
	if string(got.Status) != status {
		t.Errorf("%s = %s (%s: %s), want %s", what, got.Status, got.Reason, got.Message, status)
	}
}

func TestInstallObserveUpgradeUninstall(t *testing.T) {
	m, cs, req := setup(t)
	ctx := context.Background()
	dsClient := cs.AppsV1().DaemonSets("ops")

	obs := mustObserve(t, m, req)
	want(t, "ReleaseExists before install", obs.Exists, "False")
	if len(obs.Desired) != 2 {
		t.Fatalf("desired objects %d, want ServiceAccount and DaemonSet", len(obs.Desired))
	}
	for _, o := range obs.Desired {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != req.Owner.UID || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%s %s owners %v, want only the CR as controller", o.GetKind(), o.GetName(), refs)
		}
		if o.GetLabels()["cloister.dev/owner"] != "test" || o.GetNamespace() != "ops" {
			t.Errorf("%s %s: labels %v namespace %q", o.GetKind(), o.GetName(), o.GetLabels(), o.GetNamespace())
		}
	}

	if err := m.Install(ctx, req); err != nil {
		t.Fatal(err)
	}
	obs = mustObserve(t, m, req)
	want(t, "ReleaseExists", obs.Exists, "True")
	want(t, "ReleaseSteady", obs.Steady, "True")
	want(t, "ReleaseFailed", obs.Failed, "False")
	want(t, "ReleaseDeployed", obs.Deployed, "True")
	if specChanged(obs) || revision(t, m, req) != 1 {
		t.Errorf("after install: SpecChanged %v revision %d", specChanged(obs), revision(t, m, req))
	}
	ds, err := dsClient.Get(ctx, "las-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := ds.OwnerReferences; len(refs) != 1 || refs[0].UID != req.Owner.UID {
		t.Errorf("installed DaemonSet owners %v", refs)
	}

	// A changed spec shows up and is rolled out.
	req.Values = map[string]any{"image": "example.com/las:1", "hostPort": 18767}
	if obs = mustObserve(t, m, req); !specChanged(obs) {
		t.Error("hostPort change not seen as SpecChanged")
	}
	if err := m.Upgrade(ctx, req); err != nil {
		t.Fatal(err)
	}
	ds, _ = dsClient.Get(ctx, "las-test", metav1.GetOptions{})
	if p := ds.Spec.Template.Spec.Containers[0].Ports[0].HostPort; p != 18767 {
		t.Errorf("hostPort after upgrade %d", p)
	}
	if obs = mustObserve(t, m, req); specChanged(obs) || revision(t, m, req) != 2 {
		t.Errorf("after upgrade: SpecChanged %v revision %d", specChanged(obs), revision(t, m, req))
	}

	// Drift is repaired by an upgrade: an edited image, a deleted object.
	ds.Spec.Template.Spec.Containers[0].Image = "evil.example.com/las:6"
	if _, err := dsClient.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Upgrade(ctx, req); err != nil {
		t.Fatal(err)
	}
	ds, _ = dsClient.Get(ctx, "las-test", metav1.GetOptions{})
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "example.com/las:1" {
		t.Errorf("image after repairing upgrade %q", img)
	}
	if err := dsClient.Delete(ctx, "las-test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Upgrade(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := dsClient.Get(ctx, "las-test", metav1.GetOptions{}); err != nil {
		t.Errorf("deleted DaemonSet not recreated by upgrade: %v", err)
	}

	if err := m.Uninstall(ctx, "ops", "las-test"); err != nil {
		t.Fatal(err)
	}
	if _, err := dsClient.Get(ctx, "las-test", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet after uninstall: %v", err)
	}
	want(t, "ReleaseExists after uninstall", mustObserve(t, m, req).Exists, "False")
	if err := m.Uninstall(ctx, "ops", "las-test"); err != nil {
		t.Errorf("uninstalling a missing release: %v", err)
	}
}

// setStatus rewrites the latest revision's status as a killed operator
// would have left it, `age` ago.
func setStatus(t *testing.T, m *Manager, req Request, st rcommon.Status, age time.Duration) {
	t.Helper()
	cfg, rel := latestOf(t, m, req)
	rel.Info.Status = st
	rel.Info.LastDeployed = time.Now().Add(-age)
	if err := cfg.Releases.Update(rel); err != nil {
		t.Fatal(err)
	}
}

// A release a killed operator left pending is recovered, never stuck on
// "another operation is in progress"; a fresh pending one is waited for.
func TestInterruptedOperationsAreRecovered(t *testing.T) {
	m, cs, req := setup(t)
	ctx := context.Background()
	if err := m.Install(ctx, req); err != nil {
		t.Fatal(err)
	}

	setStatus(t, m, req, rcommon.StatusPendingUpgrade, time.Second)
	obs := mustObserve(t, m, req)
	want(t, "ReleaseSteady while an upgrade may still run", obs.Steady, "False")

	setStatus(t, m, req, rcommon.StatusPendingUpgrade, time.Hour)
	obs = mustObserve(t, m, req)
	want(t, "ReleaseSteady of an interrupted upgrade", obs.Steady, "True")
	want(t, "ReleaseDeployed of an interrupted upgrade", obs.Deployed, "False")
	want(t, "ReleaseFailed of an interrupted upgrade", obs.Failed, "False")
	if res := health.Evaluate(healthyWith(obs)); res.Action != health.ActionUpgrade {
		t.Errorf("engine action for an interrupted upgrade %s, want upgrade", res.Action)
	}
	req.Values["image"] = "example.com/las:2"
	if err := m.Upgrade(ctx, req); err != nil {
		t.Fatalf("upgrade over an interrupted upgrade: %v", err)
	}
	obs = mustObserve(t, m, req)
	want(t, "ReleaseDeployed after recovery", obs.Deployed, "True")
	ds, _ := cs.AppsV1().DaemonSets("ops").Get(ctx, "las-test", metav1.GetOptions{})
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "example.com/las:2" {
		t.Errorf("image after recovery %q", img)
	}

	// An interrupted first install: uninstall (action 8), then install.
	if err := m.Uninstall(ctx, "ops", "las-test"); err != nil {
		t.Fatal(err)
	}
	if err := m.Install(ctx, req); err != nil {
		t.Fatal(err)
	}
	setStatus(t, m, req, rcommon.StatusPendingInstall, time.Hour)
	obs = mustObserve(t, m, req)
	want(t, "ReleaseFailed of an interrupted install", obs.Failed, "True")
	if res := health.Evaluate(healthyWith(obs)); res.Action != health.ActionUninstallFailed {
		t.Errorf("engine action for an interrupted install %s, want uninstall", res.Action)
	}
	if err := m.Uninstall(ctx, "ops", "las-test"); err != nil {
		t.Fatalf("uninstalling an interrupted install: %v", err)
	}
	if err := m.Install(ctx, req); err != nil {
		t.Fatalf("installing after an interrupted install: %v", err)
	}
	if _, err := cs.AppsV1().DaemonSets("ops").Get(ctx, "las-test", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}

// healthyWith feeds the release observations to the status engine with
// everything else as desired.
func healthyWith(obs *Snapshot) health.Observations {
	ok := health.Obs(health.True, "", "")
	no := health.Obs(health.False, "", "")
	return health.Observations{CR: map[health.ConditionType]health.Observation{
		health.IsHealthy: ok, health.DeletionPresent: no, health.FinalizerPresent: ok,
		health.ReleaseExists: obs.Exists, health.ReleaseSteady: obs.Steady,
		health.ReleaseFailed: obs.Failed, health.ReleaseDeployed: obs.Deployed,
		health.AtLeastOneOwnedObjectPresent: ok, health.AllOwnedObjectsPresent: ok,
	}}
}

// A Request's Transform changes what the chart rendered, alike where the
// release is installed and where it is observed: the annotation it adds is
// on the live object, and the release is not taken for changed.
func TestTransformAfterTheChart(t *testing.T) {
	m, cs, req := setup(t)
	ctx := context.Background()
	req.Transform = func(u *unstructured.Unstructured) error {
		if u.GetKind() != "DaemonSet" {
			return nil
		}
		return unstructured.SetNestedField(u.Object, "computed", "spec", "template", "metadata", "annotations", "example.com/computed")
	}
	if err := m.Install(ctx, req); err != nil {
		t.Fatal(err)
	}
	ds, err := cs.AppsV1().DaemonSets("ops").Get(ctx, "las-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Spec.Template.Annotations["example.com/computed"]; got != "computed" {
		t.Errorf("the transformed annotation on the live DaemonSet: %q", got)
	}
	if obs := mustObserve(t, m, req); specChanged(obs) {
		t.Error("the transformed release is taken for changed")
	}
	req.Transform = func(*unstructured.Unstructured) error { return errors.New("no policy") }
	if _, err := m.Render(req); err == nil || !strings.Contains(err.Error(), "no policy") {
		t.Errorf("a failing transform: %v", err)
	}
}
