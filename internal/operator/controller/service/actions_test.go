package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// One row per action of the status table: the state before it, one
// reconcile, then what it must have done (the object), the condition the
// status showed for it, and the events, exactly. Each row fails when its
// action is removed from act: the object check is the action's effect.
func TestReconcilerActions(t *testing.T) {
	const N, W = corev1.EventTypeNormal, corev1.EventTypeWarning
	rows := []struct {
		name string
		// fresh skips converging to HEALTHY before prepare.
		fresh   bool
		prepare func(f *fixture, cr *basev1beta1.LAS)
		// check asserts the action's effect after the one reconcile.
		check func(f *fixture, cr *basev1beta1.LAS)
		// cond is the condition (of the ConfigMap when oo) the status
		// shows, and its status and reason ("" for any).
		oo     bool
		cond   health.ConditionType
		status metav1.ConditionStatus
		reason health.Reason
		events []string
	}{
		{
			name: "add finalizer", fresh: true,
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if !controllerutil.ContainsFinalizer(cr, Finalizer) {
					f.t.Errorf("finalizer not added: %v", cr.Finalizers)
				}
			},
			cond: health.FinalizerPresent, status: metav1.ConditionFalse,
			events: []string{N + " " + string(health.EventPending)},
		},
		{
			name: "install", fresh: true,
			prepare: func(f *fixture, cr *basev1beta1.LAS) { f.reconcile(cr); f.events.take() },
			check: func(f *fixture, cr *basev1beta1.LAS) {
				cm := f.owned(cr)
				if cm == nil || cm.Data["image"] != "example.com/test:1" || !metav1.IsControlledBy(cm, cr) {
					f.t.Errorf("release not installed with the CR as owner: %+v", cm)
				}
			},
			cond: health.ReleaseExists, status: metav1.ConditionFalse, reason: health.ReasonReleaseNotFound,
			events: []string{N + " " + string(health.EventInstalled)},
		},
		{
			name: "set owner",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				mustPatch(f.t, f.client, f.owned(cr), `{"metadata":{"ownerReferences":null}}`)
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if cm := f.owned(cr); !metav1.IsControlledBy(cm, cr) || len(cm.OwnerReferences) != 1 {
					f.t.Errorf("owners %v, want the CR alone", ownerUIDs(cm))
				}
			},
			oo: true, cond: health.OwnsOwnedObject, status: metav1.ConditionFalse,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventSetOwner)},
		},
		{
			name: "remove foreign owners",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: f.ns}}
				if err := f.client.Create(f.ctx, foreign); err != nil {
					f.t.Fatal(err)
				}
				cm := f.owned(cr)
				mustPatch(f.t, f.client, cm, fmt.Sprintf(`{"metadata":{"ownerReferences":[%s,{"apiVersion":"v1","kind":"ConfigMap","name":"foreign","uid":%q}]}}`,
					mustJSON(f.t, cm.OwnerReferences[0]), foreign.UID))
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if cm := f.owned(cr); !metav1.IsControlledBy(cm, cr) || len(cm.OwnerReferences) != 1 {
					f.t.Errorf("owners %v, want the CR alone", ownerUIDs(cm))
				}
			},
			oo: true, cond: health.OwnedObjectValidOwners, status: metav1.ConditionFalse,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventRemovedForeignOwners)},
		},
		{
			name: "upgrade on drift",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				mustPatch(f.t, f.client, f.owned(cr), `{"data":{"image":"evil.example.com/miner:6"}}`)
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if img := f.owned(cr).Data["image"]; img != "example.com/test:1" {
					f.t.Errorf("drift not repaired: image %q", img)
				}
			},
			oo: true, cond: health.EqualSpecs, status: metav1.ConditionFalse, reason: health.ReasonDrifted,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventUpgraded)},
		},
		{
			name: "upgrade on a spec change",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				mustPatch(f.t, f.client, cr, `{"spec":{"image":"example.com/test:2"}}`)
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if img := f.owned(cr).Data["image"]; img != "example.com/test:2" {
					f.t.Errorf("spec not rolled out: image %q", img)
				}
			},
			oo: true, cond: health.EqualSpecs, status: metav1.ConditionFalse, reason: health.ReasonSpecChanged,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventUpgraded)},
		},
		{
			name:    "uninstall a failed release",
			prepare: func(f *fixture, cr *basev1beta1.LAS) { f.setReleaseStatus(cr, rcommon.StatusFailed, 0) },
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if f.releaseOf(cr) != nil || f.owned(cr) != nil {
					f.t.Error("failed release not uninstalled")
				}
			},
			cond: health.ReleaseFailed, status: metav1.ConditionTrue, reason: health.ReasonReleaseFailed,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventUninstalledFailedRelease)},
		},
		{
			name: "recover an interrupted install",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				f.setReleaseStatus(cr, rcommon.StatusPendingInstall, time.Hour)
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if f.releaseOf(cr) != nil {
					f.t.Error("interrupted install not uninstalled (the next pass installs afresh)")
				}
			},
			cond: health.ReleaseFailed, status: metav1.ConditionTrue, reason: health.ReasonInterruptedInstall,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventUninstalledFailedRelease)},
		},
		{
			name: "recover an interrupted upgrade",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				f.setReleaseStatus(cr, rcommon.StatusPendingUpgrade, time.Hour)
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if rel := f.releaseOf(cr); rel == nil || rel.Info.Status != rcommon.StatusDeployed || rel.Version != 2 {
					f.t.Errorf("interrupted upgrade not upgraded again: %+v", rel)
				}
			},
			cond: health.ReleaseSteady, status: metav1.ConditionTrue, reason: health.ReasonInterruptedOperation,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventUpgraded)},
		},
		{
			name: "uninstall on deletion",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				if err := f.client.Delete(f.ctx, cr); err != nil {
					f.t.Fatal(err)
				}
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if f.releaseOf(cr) != nil || f.owned(cr) != nil {
					f.t.Error("release not uninstalled on deletion")
				}
				if !controllerutil.ContainsFinalizer(cr, Finalizer) {
					f.t.Error("finalizer gone before the release was seen gone")
				}
				f.reconcile(cr) // the next pass lets the CR go
				if err := f.client.Get(f.ctx, client.ObjectKeyFromObject(cr), cr); !apierrors.IsNotFound(err) {
					f.t.Errorf("CR after its release is gone: %v, finalizers %v", err, cr.Finalizers)
				}
			},
			cond: health.DeletionPresent, status: metav1.ConditionTrue, reason: health.ReasonDeleting,
			events: []string{N + " " + string(health.EventPending), N + " " + string(health.EventUninstalled)},
		},
		{
			name: "give up uninstalling after the deletion timeout",
			prepare: func(f *fixture, cr *basev1beta1.LAS) {
				f.blockReleaseDeletion(cr)
				if err := f.client.Delete(f.ctx, cr); err != nil {
					f.t.Fatal(err)
				}
				// Within the timeout a failing uninstall keeps the CR.
				if _, err := f.r.Reconcile(f.ctx, reqFor(cr)); err == nil {
					f.t.Error("an uninstall the API server refuses did not fail")
				}
				f.get(cr)
				if got := f.events.take(); !slices.Contains(got, W+" "+string(health.EventUninstalled)+health.EventFailedSuffix) {
					f.t.Errorf("events within the timeout %v, want the failed uninstall", got)
				}
				f.clock.SetTime(cr.DeletionTimestamp.Add(DefaultDeletionTimeout + time.Minute))
			},
			check: func(f *fixture, cr *basev1beta1.LAS) {
				if err := f.client.Get(f.ctx, client.ObjectKeyFromObject(cr), cr); !apierrors.IsNotFound(err) {
					f.t.Errorf("CR kept past the deletion timeout: %v, finalizers %v", err, cr.Finalizers)
				}
			},
			cond: health.DeletionPresent, status: metav1.ConditionTrue, reason: health.ReasonDeleting,
			events: []string{W + " " + string(health.EventUninstallTimedOut)},
		},
	}
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			f := newFixture(t, fmt.Sprintf("actions-%d", i))
			cr := f.newCR(fmt.Sprintf("actions-%d", i))
			if !row.fresh {
				f.converge(cr)
			}
			if row.prepare != nil {
				row.prepare(f, cr)
			}
			f.reconcile(cr)
			seen := cr.DeepCopy()
			if err := f.client.Get(f.ctx, client.ObjectKeyFromObject(cr), seen); err == nil {
				cr = seen
			}
			id := ""
			if row.oo {
				id = configMapID(cr)
			}
			if c := condition(t, cr, id, row.cond); c.Status != row.status || (row.reason != "" && c.Reason != string(row.reason)) {
				t.Errorf("condition %s = %s (%s: %s), want %s (%s)", c.Type, c.Status, c.Reason, c.Message, row.status, row.reason)
			}
			if got := f.events.take(); !slices.Equal(got, row.events) {
				t.Errorf("events %v, want exactly %v", got, row.events)
			}
			row.check(f, cr)
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// helmStorage reads and writes release records as Helm does.
func (f *fixture) helmStorage() *storage.Storage {
	cs := kubernetes.NewForConfigOrDie(envConfig)
	return release.Records(cs, f.ns, f.ns, nil)
}

// releaseOf is the latest revision of the CR's release, nil without one.
func (f *fixture) releaseOf(cr *basev1beta1.LAS) *helmrelease.Release {
	f.t.Helper()
	r, err := f.helmStorage().Last("test-" + cr.Name)
	if err != nil {
		return nil
	}
	return r.(*helmrelease.Release)
}

// setReleaseStatus rewrites the latest revision as an operator killed
// mid-operation (or a failed one) leaves it, age ago.
func (f *fixture) setReleaseStatus(cr *basev1beta1.LAS, st rcommon.Status, age time.Duration) {
	f.t.Helper()
	rel := f.releaseOf(cr)
	if rel == nil {
		f.t.Fatal("no release to rewrite")
	}
	rel.Info.Status = st
	rel.Info.LastDeployed = time.Now().Add(-age)
	if err := f.helmStorage().Update(rel); err != nil {
		f.t.Fatal(err)
	}
}

// blockReleaseDeletion makes the API server refuse to delete the CR's
// release records (a ValidatingAdmissionPolicy), so every uninstall fails
// and the release stays, and waits until the refusal is in force.
func (f *fixture) blockReleaseDeletion(cr *basev1beta1.LAS) {
	f.t.Helper()
	name := "block-" + f.ns
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"owner": "helm", "name": "test-" + cr.Name}}
	deny := admissionregistrationv1.Deny
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ObjectSelector: selector,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "release records of this test cannot be deleted"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{deny},
		},
	}
	cs := kubernetes.NewForConfigOrDie(envConfig)
	ctx := context.Background()
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	})
	// The policy reaches the admission chain asynchronously: probe with a
	// dry-run delete of a record until it is refused.
	records, err := cs.CoreV1().ConfigMaps(f.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(selector)})
	if err != nil || len(records.Items) == 0 {
		f.t.Fatalf("release records: %v (%d)", err, len(records.Items))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cs.CoreV1().ConfigMaps(f.ns).Delete(ctx, records.Items[0].Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the deletion of release records is still allowed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
