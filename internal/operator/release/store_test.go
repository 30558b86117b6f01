package release

import (
	"context"
	"testing"
	"time"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Release records live in the operator's namespace. Records an older
// operator kept beside the objects are adopted by installing the release
// again over its objects; a record a tenant forges in the objects'
// namespace is never read, so it cannot make Helm delete what it lists.
func TestRecordsLiveInTheOperatorsNamespace(t *testing.T) {
	old, cs, req := setup(t)
	ctx := context.Background()
	const home = "cloister-system"
	for _, ns := range []string{home, "ops2"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// An older operator installed the release with its records in "ops".
	if err := old.Install(ctx, req); err != nil {
		t.Fatal(err)
	}
	ds, err := cs.AppsV1().DaemonSets("ops").Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	m, err := NewManager(old.config, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetRecordNamespace(home)
	if rel, err := m.Latest("ops", req.Name); err != nil || rel != nil {
		t.Fatalf("a record kept beside the objects was read: %v %v", rel, err)
	}
	if err := m.Install(ctx, req); err != nil {
		t.Fatalf("adopting the objects of an older operator's release: %v", err)
	}
	after, err := cs.AppsV1().DaemonSets("ops").Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil || after.UID != ds.UID {
		t.Fatalf("the DaemonSet was not adopted in place: %v", err)
	}
	rec, err := cs.CoreV1().ConfigMaps(home).Get(ctx, "sh.helm.release.v1.ops."+req.Name+".v1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the record in the operator's namespace: %v", err)
	}
	if rec.Labels[LabelReleaseNamespace] != "ops" || rec.Labels["name"] != req.Name {
		t.Errorf("record labels %v", rec.Labels)
	}

	// The same release name in another namespace is another release.
	other := req
	other.Namespace = "ops2"
	if err := m.Install(ctx, other); err != nil {
		t.Fatal(err)
	}
	if r1, r2 := revision(t, m, req), revision(t, m, other); r1 != 1 || r2 != 1 {
		t.Errorf("revisions %d and %d, want 1 each", r1, r2)
	}

	// A tenant of "ops" forges a newer deployed revision listing a
	// ConfigMap of theirs to be deleted by the next upgrade.
	victim, err := cs.CoreV1().ConfigMaps("ops").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := &helmrelease.Release{Name: req.Name, Namespace: "ops", Version: 99,
		Manifest: "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim\n  namespace: ops\n",
		Chart:    req.Chart,
		Info:     &helmrelease.Info{Status: rcommon.StatusDeployed, LastDeployed: time.Now(), FirstDeployed: time.Now()}}
	tenantStore := storage.Init(driver.NewConfigMaps(cs.CoreV1().ConfigMaps("ops")))
	if err := tenantStore.Create(forged); err != nil {
		t.Fatal(err)
	}
	if err := m.Upgrade(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ops").Get(ctx, victim.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the forged record deleted what it listed: %v", err)
	}
	if v := revision(t, m, req); v != 2 {
		t.Errorf("revision after the upgrade %d, want 2 (the forged 99 not read)", v)
	}
	// With the records beside the objects, the same forgery works: the
	// attack this layout closes.
	if err := old.Upgrade(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ops").Get(ctx, victim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the forgery had no effect on an older operator either (%v): the test proves nothing", err)
	}
}
