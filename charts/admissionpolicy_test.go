package charts

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

const opNS = "cloister-system"

// installRBAC applies the operator chart's RBAC and admission policies to a
// real API server and returns a client acting as the operator's service
// account.
func installRBAC(t *testing.T, ctx context.Context, admin client.Client, cfg *rest.Config) client.Client {
	t.Helper()
	for key, o := range renderOperatorIn(t, opNS, map[string]any{}) {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
		}
	}
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + opNS + ":cloister-operator"}
	c, err := client.New(as, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func labelled(labels map[string]string) map[string]string {
	out := map[string]string{common.LabelManagedBy: common.ManagedByOperator}
	for k, v := range labels {
		out[k] = v
	}
	return out
}

func testDaemonSet(ns, name string, labels map[string]string) *appsv1.DaemonSet {
	sel := map[string]string{"app": name}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}}}}}
}

// The operator's service account, with the chart's role and admission
// policies on a real API server, writes outside its namespace only what is
// its own, and changes only Cloister's labels of nodes. Each refusal below
// is allowed by the role alone.
func TestOperatorWritesOnlyItsOwn(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{})
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{opNS, "team-a"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	tenant := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
		StringData: map[string]string{"password": "tenant-password-1234"}}
	system := testDaemonSet("kube-system", "kube-proxy", nil)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}}}
	for _, o := range []client.Object{tenant, system, node} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	op := installRBAC(t, ctx, admin, cfg)

	// Admission policies take effect once the API server's informers
	// have them: wait for the first refusal.
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "team-a"}}
	deadline := time.Now().Add(time.Minute)
	for {
		err := op.Create(ctx, probe.DeepCopy())
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "only objects labelled cloister.dev/managed-by=cloister-operator") {
			break
		}
		if err == nil {
			if err := admin.Delete(ctx, probe.DeepCopy()); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy never refused an unlabelled ConfigMap: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	forbidden := func(what string, err error, says string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: want forbidden saying %q, got %v", what, says, err)
		}
		if err != nil && strings.Contains(err.Error(), "tenant-password") {
			t.Errorf("%s: the refusal shows the Secret: %v", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// A `patch {}` would return the whole Secret.
	forbidden("patch {} of a tenant's Secret",
		op.Patch(ctx, tenant.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{}`))), "only its own objects")
	forbidden("delete-collection of a tenant's Secrets",
		op.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace("team-a")), "only its own objects")
	forbidden("an unlabelled DaemonSet in kube-system",
		op.Create(ctx, testDaemonSet("kube-system", "evil", nil)), "only objects labelled")
	forbidden("deleting kube-system's DaemonSet", op.Delete(ctx, system.DeepCopy()), "only its own objects")
	forbidden("taking a DaemonSet over by labelling it",
		op.Patch(ctx, system.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"cloister.dev/managed-by":"cloister-operator"}}}`))), "only its own objects")
	forbidden("an unlabelled ClusterRole", op.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}), "only objects labelled")

	// What is its own it writes; its namespace is its own.
	own := testDaemonSet("team-a", "las-x", labelled(nil))
	allowed("a labelled DaemonSet", op.Create(ctx, own))
	allowed("changing it", op.Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"a":"b"}}}`))))
	allowed("deleting it", op.Delete(ctx, own))
	allowed("a Secret in its namespace", op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: opNS}}))
	// An object an older operator made without the label: controlled by a
	// Cloister resource.
	yes := true
	legacy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cas-x-simulation", Namespace: "team-a",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "services.cloister.dev/v1beta1", Kind: "CAS", Name: "x",
			UID: "5e0b3f1c-0000-4000-8000-000000000001", Controller: &yes}}}}
	if err := admin.Create(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	allowed("labelling an older operator's ConfigMap", op.Patch(ctx, legacy, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"cloister.dev/managed-by":"cloister-operator"}}}`))))

	// Binding cluster-admin: RBAC refuses what the operator does not hold.
	err = op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "escalate", Labels: labelled(nil)},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "cloister-operator", Namespace: opNS}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"}})
	forbidden("binding cluster-admin", err, "escalat")

	// Nodes: the operator and its charts' node agents change only
	// cloister.dev/ labels.
	agentRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sgx-default"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}}}
	agentBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sgx-default"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sgx-default", Namespace: "team-a"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "sgx-default"}}
	for _, o := range []client.Object{agentRole, agentBinding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	agentCfg := rest.CopyConfig(cfg)
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:team-a:sgx-default"}
	agent, err := client.New(agentCfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for who, c := range map[string]client.Client{"the operator": op, "the SGX plugin": agent} {
		patch := func(p string) error {
			return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}, client.RawPatch(types.MergePatchType, []byte(p)))
		}
		forbidden(who+" setting a node's zone", patch(`{"metadata":{"labels":{"zone":"b"}}}`), "only node labels under cloister.dev")
		forbidden(who+" removing a node's label", patch(`{"metadata":{"labels":{"zone":null}}}`), "only node labels under cloister.dev")
		forbidden(who+" tainting a node", patch(`{"spec":{"unschedulable":true}}`), "and nothing else")
		forbidden(who+" annotating a node", patch(`{"metadata":{"annotations":{"a":"b"}}}`), "and nothing else")
		forbidden(who+" setting a label of a look-alike domain", patch(`{"metadata":{"labels":{"evilcloister.dev/x":"1"}}}`), "only node labels under cloister.dev")
		allowed(who+" labelling an SGX node", patch(`{"metadata":{"labels":{"cloister.dev/sgx":"true"}}}`))
		allowed(who+" unlabelling it", patch(`{"metadata":{"labels":{"cloister.dev/sgx":null}}}`))
		// The runtime installer's handler label.
		allowed(who+" labelling a runtime handler", patch(`{"metadata":{"labels":{"runtime.cloister.dev/cloister-cc-sim-97cf0515":"true"}}}`))
		allowed(who+" unlabelling it", patch(`{"metadata":{"labels":{"runtime.cloister.dev/cloister-cc-sim-97cf0515":null}}}`))
	}
	var after corev1.Node
	if err := admin.Get(ctx, client.ObjectKeyFromObject(node), &after); err != nil {
		t.Fatal(err)
	}
	if after.Labels["zone"] != "a" || after.Spec.Unschedulable || len(after.Annotations) != 0 {
		t.Errorf("the node changed: %v %v %v", after.Labels, after.Spec.Unschedulable, after.Annotations)
	}
	// Other service accounts are not the policies' business.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "team-a"}}
	if err := admin.Create(ctx, other); err != nil {
		t.Errorf("the admin writing an unlabelled Secret: %v", err)
	}
}
