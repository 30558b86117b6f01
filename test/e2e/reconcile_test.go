//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	oprelease "github.com/cloister-cc/cloister/internal/operator/release"
)

// newLAS is a LAS whose objects live in ns, on its own host port (two LAS
// on one port cannot share a node).
func newLAS(t *testing.T, crs client.Client, name, ns string, port int32) *basev1beta1.LAS {
	t.Helper()
	las := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: name}}
	las.Spec.Namespace, las.Spec.HostPort = ns, port
	las.Spec.Image = "ghcr.io/cloister-cc/cloister-las:e2e-1"
	if err := crs.Create(context.Background(), las); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = crs.Delete(context.Background(), &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return las
}

// conditionLog records every condition value a CR's status ever showed,
// from a watch, so a test sees the steps the operator took even when they
// pass within one poll.
type conditionLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

func watchConditions(t *testing.T, crs client.WithWatch, list client.ObjectList, name string) *conditionLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := crs.Watch(ctx, list, client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	l := &conditionLog{seen: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(serviceCR)
			if !ok {
				continue
			}
			l.mu.Lock()
			for _, c := range obj.GetServiceStatus().Conditions {
				l.seen[c.Type+"="+string(c.Status)] = true
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return l
}

func (l *conditionLog) waitSeen(t *testing.T, condType string, status metav1.ConditionStatus) {
	t.Helper()
	key := condType + "=" + string(status)
	waitFor(t, "the CR's conditions to show "+key, time.Minute, func(context.Context) (bool, string, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.seen[key], fmt.Sprintf("%d condition values seen", len(l.seen)), nil
	})
}

func getDaemonSet(ctx context.Context, cs kubernetes.Interface, ns, name string) (*appsv1.DaemonSet, error) {
	return cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
}

// Owned objects are repaired: a deleted DaemonSet is recreated, an edited
// one restored, a foreign owner removed, and the CR's conditions show each
// step.
func TestOwnedObjectsAreRepaired(t *testing.T) {
	_, cs, crs, _ := sharedOperator(t)
	ns := namespace(t, cs)
	las := newLAS(t, crs, "repair", ns, 18801)
	waitState(t, crs, las, common.StateHealthy)
	log := watchConditions(t, crs, &basev1beta1.LASList{}, las.Name)
	dsName := "las-" + las.Name
	id := health.ObjectID("apps", "DaemonSet", dsName)
	ctx := context.Background()

	ds, err := getDaemonSet(ctx, cs, ns, dsName)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.AppsV1().DaemonSets(ns).Delete(ctx, dsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the DaemonSet to be recreated", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getDaemonSet(ctx, cs, ns, dsName)
		if err != nil {
			return false, err.Error(), nil
		}
		return got.UID != ds.UID, "still the old DaemonSet", nil
	})
	log.waitSeen(t, health.OOConditionType(id, health.OwnedObjectPresent), metav1.ConditionFalse)
	waitState(t, crs, las, common.StateHealthy)

	ds, err = getDaemonSet(ctx, cs, ns, dsName)
	if err != nil {
		t.Fatal(err)
	}
	want := ds.Spec.Template.Spec.Containers[0].Image
	// A patch, not read-modify-write: the DaemonSet controller writes its
	// status meanwhile, and an Update would conflict with it.
	edit := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"evil.example.com/las:6"}]`
	if _, err := cs.AppsV1().DaemonSets(ns).Patch(ctx, dsName, types.JSONPatchType, []byte(edit), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the DaemonSet's image to be restored", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getDaemonSet(ctx, cs, ns, dsName)
		if err != nil {
			return false, err.Error(), nil
		}
		img := got.Spec.Template.Spec.Containers[0].Image
		return img == want, img, nil
	})
	log.waitSeen(t, health.OOConditionType(id, health.EqualSpecs), metav1.ConditionFalse)
	waitState(t, crs, las, common.StateHealthy)

	foreign, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"base.cloister.dev/v1beta1","kind":"LAS","name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true},{"apiVersion":"v1","kind":"ConfigMap","name":"foreign","uid":%q}]}}`,
		las.Name, las.UID, foreign.UID)
	if _, err := cs.AppsV1().DaemonSets(ns).Patch(ctx, dsName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the foreign owner to be removed", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getDaemonSet(ctx, cs, ns, dsName)
		if err != nil {
			return false, err.Error(), nil
		}
		refs := got.OwnerReferences
		return len(refs) == 1 && refs[0].UID == las.UID, fmt.Sprintf("owners %v", refs), nil
	})
	log.waitSeen(t, health.OOConditionType(id, health.OwnedObjectValidOwners), metav1.ConditionFalse)
	waitState(t, crs, las, common.StateHealthy)
}

// Deleting a CR uninstalls its release and removes every object it owned,
// cluster-scoped ones included, then the finalizer.
func TestDeletionLeavesNothing(t *testing.T) {
	_, cs, crs, _ := sharedOperator(t)
	ns := namespace(t, cs)
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}
	plugin.Spec.Namespace = ns
	plugin.Spec.NodeSelector = common.NodeSelector{"cloister.dev/tee": "sgx"}
	ctx := context.Background()
	if err := crs.Create(ctx, plugin); err != nil {
		t.Fatal(err)
	}
	waitState(t, crs, plugin, common.StateHealthy)
	if !slices.Contains(plugin.Finalizers, service.Finalizer) {
		t.Fatalf("finalizers %v", plugin.Finalizers)
	}
	release := "sgx-" + plugin.Name
	for what, get := range map[string]func() error{
		"DaemonSet": func() error { _, err := getDaemonSet(ctx, cs, ns, release); return err },
		"ClusterRole": func() error {
			_, err := cs.RbacV1().ClusterRoles().Get(ctx, "cloister-"+release, metav1.GetOptions{})
			return err
		},
		"ClusterRoleBinding": func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "cloister-"+release, metav1.GetOptions{})
			return err
		},
		"ServiceAccount": func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, release, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Fatalf("%s of a HEALTHY plugin: %v", what, err)
		}
	}

	if err := crs.Delete(ctx, plugin); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SGXPlugin to be gone", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin)
		return apierrors.IsNotFound(err), fmt.Sprintf("finalizers %v, err %v", plugin.Finalizers, err), nil
	})
	waitFor(t, "no object of the release to be left", time.Minute, func(ctx context.Context) (bool, string, error) {
		owned := metav1.ListOptions{LabelSelector: service.LabelOwnerName + "=" + plugin.Name}
		left := []string{}
		if l, err := cs.AppsV1().DaemonSets(ns).List(ctx, owned); err != nil || len(l.Items) > 0 {
			left = append(left, "DaemonSet")
		}
		if l, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, owned); err != nil || len(l.Items) > 0 {
			left = append(left, "ServiceAccount")
		}
		if l, err := cs.RbacV1().ClusterRoles().List(ctx, owned); err != nil || len(l.Items) > 0 {
			left = append(left, "ClusterRole")
		}
		if l, err := cs.RbacV1().ClusterRoleBindings().List(ctx, owned); err != nil || len(l.Items) > 0 {
			left = append(left, "ClusterRoleBinding")
		}
		if l, err := cs.CoreV1().Pods(ns).List(ctx, owned); err != nil || len(l.Items) > 0 {
			left = append(left, "Pods")
		}
		records := metav1.ListOptions{LabelSelector: "owner=helm,name=" + release + "," + oprelease.LabelReleaseNamespace + "=" + ns}
		if l, err := cs.CoreV1().ConfigMaps(operatorNamespace).List(ctx, records); err != nil || len(l.Items) > 0 {
			left = append(left, "release records")
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left), nil
	})
}

// A LAS pod whose SGX-access readiness probe fails makes the LAS UNHEALTHY
// (the "LAS Unhealthy" case); when it passes again the LAS heals.
func TestLASProbeFailureIsUnhealthy(t *testing.T) {
	_, cs, crs, _ := sharedOperator(t)
	ns := namespace(t, cs)
	las := newLAS(t, crs, "probe", ns, 18803)
	waitState(t, crs, las, common.StateHealthy)
	ctx := context.Background()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: service.LabelOwnerName + "=" + las.Name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("LAS pods: %v %v", pods, err)
	}
	setReady := func(ready corev1.ConditionStatus) {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pods.Items[0].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = ready
				p.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = ready == corev1.ConditionTrue
		}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setReady(corev1.ConditionFalse)
	waitState(t, crs, las, common.StateUnhealthy)
	node := pods.Items[0].Spec.NodeName
	if las.Status.LASReplicaAlert != 1 || las.Status.Nodes[node].Ready {
		t.Errorf("lasReplicaAlert %d, node %s %+v", las.Status.LASReplicaAlert, node, las.Status.Nodes[node])
	}
	if c := findCondition(las.Status.Conditions, health.IsHealthy); c == nil || c.Reason != "LASReplicaAlert" {
		t.Errorf("IsHealthy %+v", c)
	}
	setReady(corev1.ConditionTrue)
	waitState(t, crs, las, common.StateHealthy)
}

// An idle operator makes no write requests: with every CR converged and
// nothing changing for 60 s, it neither writes status nor touches a
// release or an owned object.
func TestIdleOperatorMakesNoWrites(t *testing.T) {
	c, cs, crs, op := sharedOperator(t)
	ctx := context.Background()
	if out, err := kubectl(t, c, "apply", "-f", "config/samples/base_v1beta1_sgxplugin.yaml", "-f", "config/samples/base_v1beta1_las.yaml"); err != nil {
		t.Fatalf("applying the samples: %v\n%s", err, out)
	}
	// Earlier tests' namespaces may still be terminating: that is change.
	waitFor(t, "earlier tests' namespaces to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, ns := range list.Items {
			if ns.Status.Phase == corev1.NamespaceTerminating {
				return false, ns.Name + " terminating", nil
			}
		}
		return true, "", nil
	})
	var plugins basev1beta1.SGXPluginList
	var lases basev1beta1.LASList
	if err := crs.List(ctx, &plugins); err != nil {
		t.Fatal(err)
	}
	if err := crs.List(ctx, &lases); err != nil {
		t.Fatal(err)
	}
	for i := range plugins.Items {
		waitState(t, crs, &plugins.Items[i], common.StateHealthy)
	}
	for i := range lases.Items {
		waitState(t, crs, &lases.Items[i], common.StateHealthy)
	}
	time.Sleep(5 * time.Second) // let the last reconciles finish

	if err := crs.List(ctx, &plugins); err != nil {
		t.Fatal(err)
	}
	if err := crs.List(ctx, &lases); err != nil {
		t.Fatal(err)
	}
	before := op.apiRequests(t)
	const idle = 60 * time.Second
	time.Sleep(idle)
	after := op.apiRequests(t)
	var writes, all float64
	for method, n := range after {
		d := n - before[method]
		all += d
		if method != "GET" {
			writes += d
			if d > 0 {
				t.Errorf("%v %s requests while idle", d, method)
			}
		}
	}
	t.Logf("idle for %s with %d SGXPlugins and %d LAS: %v API requests, %v writes", idle, len(plugins.Items), len(lases.Items), all, writes)
	for _, p := range plugins.Items {
		var now basev1beta1.SGXPlugin
		if err := crs.Get(ctx, client.ObjectKeyFromObject(&p), &now); err != nil {
			t.Fatal(err)
		}
		if now.ResourceVersion != p.ResourceVersion {
			t.Errorf("SGXPlugin %s changed while idle", p.Name)
		}
	}
	for _, l := range lases.Items {
		var now basev1beta1.LAS
		if err := crs.Get(ctx, client.ObjectKeyFromObject(&l), &now); err != nil {
			t.Fatal(err)
		}
		if now.ResourceVersion != l.ResourceVersion {
			t.Errorf("LAS %s changed while idle", l.Name)
		}
	}
}
