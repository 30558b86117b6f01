package charts

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

const opNS = "cloister-system"

// installRBAC applies the operator chart's RBAC and admission policies to a
// real API server and returns clients acting as the operator's service
// account and as a second service account bound to the same roles.
func installRBAC(t *testing.T, ctx context.Context, admin client.Client, cfg *rest.Config) (op, twin client.Client) {
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
	// A second identity an administrator (or an attacker holding the
	// right to bind) gave the operator's roles.
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "helper", Namespace: "robots"}}
	for _, o := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "helper"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cloister-operator"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: opNS}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cloister-operator"}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return impersonate(t, cfg, "system:serviceaccount:"+opNS+":cloister-operator"),
		impersonate(t, cfg, "system:serviceaccount:robots:helper")
}

func impersonate(t *testing.T, cfg *rest.Config, user string) client.Client {
	t.Helper()
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
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

// The operator's service account, and a second account bound to the same
// roles, with the chart's roles and admission policies on a real API
// server, write nothing in kube-system, deploy only in the namespaces an
// administrator marked, touch only what is their own there and in the home
// namespace, change no Cloister resource's spec, and change only
// Cloister's labels of nodes. Each refusal below is allowed by the roles
// alone.
func TestOperatorWritesOnlyItsOwn(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{"cloister-operator/files/crds"}})
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: opNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{common.LabelManagedNamespace: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pulls", Labels: map[string]string{common.LabelPullSecretRequest: "regcred"}}},
	} {
		if err := admin.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	tenant := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
		StringData: map[string]string{"password": "tenant-password-1234"}}
	source := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: opNS,
		Labels: map[string]string{common.LabelShareable: "true"}}}
	system := testDaemonSet("team-a", "kube-proxy", nil)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}}}
	cas := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "services.cloister.dev/v1beta1", "kind": "CAS",
		"metadata": map[string]any{"name": "cas", "namespace": "team-a"}, "spec": map[string]any{}}}
	for _, o := range []client.Object{tenant, source, system, node, cas} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	op, twin := installRBAC(t, ctx, admin, cfg)

	// Admission policies take effect once the API server's informers
	// have them: wait for each policy's first refusal, of a probe object
	// made for it, before its checks.
	probeNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe-node"}}
	probeCAS := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "services.cloister.dev/v1beta1", "kind": "CAS",
		"metadata": map[string]any{"name": "probe", "namespace": "team-a"}, "spec": map[string]any{}}}
	for _, o := range []client.Object{probeNode, probeCAS} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "team-a"}}
	untilRefused(t, "an unlabelled ConfigMap", "only objects labelled cloister.dev/managed-by=cloister-operator", func() error {
		err := op.Create(ctx, probe.DeepCopy())
		if err == nil {
			err = admin.Delete(ctx, probe.DeepCopy())
		}
		return err
	})
	untilRefused(t, "a CAS's spec", "the operator changes its finalizers", func() error {
		return op.Patch(ctx, probeCAS.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`)))
	})
	untilRefused(t, "a node's label", "only node labels under cloister.dev", func() error {
		return op.Patch(ctx, probeNode.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`)))
	})

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
	merge := func(p string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(p)) }

	for who, c := range map[string]client.Client{"operator": op, "twin": twin} {
		// Nothing in the system namespaces, nothing in a tenant's.
		forbidden(who+": a CronJob in kube-system", c.Create(ctx, testCronJob("kube-system", who+"-job", labelled(nil))), "writes nothing in namespace kube-system")
		forbidden(who+": a Deployment in kube-system", c.Create(ctx, testDeployment("kube-system", who+"-d", labelled(nil))), "writes nothing in namespace kube-system")
		forbidden(who+": a Deployment in a tenant's namespace", c.Create(ctx, testDeployment("tenant", who+"-d", labelled(nil))), "namespace tenant is not one the operator manages")
		forbidden(who+": a PodDisruptionBudget in a tenant's namespace", c.Create(ctx, testPDB("tenant", who+"-pdb", labelled(nil))), "not one the operator manages")
		forbidden(who+": a Secret copy where none was asked for", c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: "regcred", Namespace: "tenant", Labels: labelled(nil)}}), "not one the operator manages")

		// In a managed namespace, only its own.
		// A `patch {}` would return the whole Secret.
		forbidden(who+": patch {} of a tenant's Secret", c.Patch(ctx, tenant.DeepCopy(), merge(`{}`)), "only its own objects")
		forbidden(who+": delete-collection of a tenant's Secrets", c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace("team-a")), "only its own objects")
		forbidden(who+": an unlabelled DaemonSet", c.Create(ctx, testDaemonSet("team-a", who+"-evil", nil)), "only objects labelled")
		forbidden(who+": deleting a DaemonSet not its own", c.Delete(ctx, system.DeepCopy()), "only its own objects")
		forbidden(who+": taking a DaemonSet over by labelling it", c.Patch(ctx, system.DeepCopy(),
			merge(`{"metadata":{"labels":{"cloister.dev/managed-by":"cloister-operator"}}}`)), "only its own objects")
		forbidden(who+": an unlabelled CronJob", c.Create(ctx, testCronJob("team-a", who+"-job", nil)), "only objects labelled")
		forbidden(who+": an unlabelled ClusterRole", c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: who + "-mine"}}), "only objects labelled")
		forbidden(who+": an event about a Secret", c.Create(ctx, testEvent("team-a", who+"-ev", "v1", "Secret", "db")), "events about Cloister resources only")

		// Its home namespace holds what its charts render and what it
		// keeps there by name, nothing else.
		forbidden(who+": an unlabelled ConfigMap at home", c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: who + "-cm", Namespace: opNS}}), "only objects labelled")
		forbidden(who+": a release record not Helm's", c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "sh.helm.release.v1." + who + ".v1", Namespace: opNS}}), "only objects labelled")
		forbidden(who+": deleting the administrator's pull secret", c.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(opNS),
			client.MatchingLabels{common.LabelShareable: "true"}), "only its own objects")

		// A tenant's pod it may not delete; a pod of its own (a Vault
		// replica it replaces for a new certificate) it may.
		tenantPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: who + "-tenant-pod", Namespace: "team-a"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		ownPod := tenantPod.DeepCopy()
		ownPod.Name, ownPod.Labels = who+"-vault-0", labelled(nil)
		for _, p := range []*corev1.Pod{tenantPod, ownPod} {
			if err := admin.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		forbidden(who+": deleting a tenant's pod", c.Delete(ctx, tenantPod.DeepCopy()), "only its own objects")
		allowed(who+": deleting a pod of its own", c.Delete(ctx, ownPod.DeepCopy()))

		// Cloister resources are their users'.
		forbidden(who+": changing a CAS's spec", c.Patch(ctx, cas.DeepCopy(), merge(`{"spec":{"replicas":3}}`)), "the operator changes its finalizers")
		forbidden(who+": labelling a CAS", c.Patch(ctx, cas.DeepCopy(), merge(`{"metadata":{"labels":{"a":"b"}}}`)), "the operator changes its finalizers")

		// What is its own it writes.
		own := testDaemonSet("team-a", who+"-las", labelled(nil))
		allowed(who+": a labelled DaemonSet", c.Create(ctx, own))
		allowed(who+": changing it", c.Patch(ctx, own, merge(`{"metadata":{"annotations":{"a":"b"}}}`)))
		allowed(who+": deleting it", c.Delete(ctx, own))
		allowed(who+": a labelled CronJob", c.Create(ctx, testCronJob("team-a", who+"-backup", labelled(nil))))
		allowed(who+": a labelled PodDisruptionBudget", c.Create(ctx, testPDB("team-a", who+"-pdb", labelled(nil))))
		allowed(who+": a Secret copy where one was asked for", c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: who + "-regcred", Namespace: "pulls", Labels: labelled(nil)}}))
		allowed(who+": an event about a CAS", c.Create(ctx, testEvent("team-a", who+"-cas", "services.cloister.dev/v1beta1", "CAS", "cas")))
		allowed(who+": a labelled Secret at home", c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: who + "-s", Namespace: opNS, Labels: labelled(nil)}}))
		allowed(who+": a release record", c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "sh.helm.release.v1.team-a." + who + ".v1", Namespace: opNS, Labels: map[string]string{"owner": "helm"}}}))
		allowed(who+": a finalizer on a CAS", c.Patch(ctx, cas.DeepCopy(), merge(`{"metadata":{"finalizers":["cloister.dev/`+who+`"]}}`)))

		// Binding cluster-admin: RBAC refuses what the roles do not hold.
		forbidden(who+": binding cluster-admin", c.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: who + "-escalate", Labels: labelled(nil)},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "cloister-operator", Namespace: opNS}},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"}}), "escalat")
	}
	// Kept by name at home: the webhook certificate and the leader lease.
	allowed("the webhook certificate", op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloister-operator-webhook-cert", Namespace: opNS}}))
	allowed("the leader lease", op.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cloister-operator.cloister.dev", Namespace: opNS}}))
	forbidden("another lease", op.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: opNS}}), "only objects labelled")

	// An object an older operator made without the label: controlled by a
	// Cloister resource.
	yes := true
	legacy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cas-x-simulation", Namespace: "team-a",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "services.cloister.dev/v1beta1", Kind: "CAS", Name: "x",
			UID: "5e0b3f1c-0000-4000-8000-000000000001", Controller: &yes}}}}
	if err := admin.Create(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	allowed("labelling an older operator's ConfigMap", op.Patch(ctx, legacy, merge(`{"metadata":{"labels":{"cloister.dev/managed-by":"cloister-operator"}}}`)))

	// Nodes: the operator, its twin and its charts' node agents change
	// only cloister.dev/ labels.
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
	agent := impersonate(t, cfg, "system:serviceaccount:team-a:sgx-default")
	for who, c := range map[string]client.Client{"the operator": op, "its twin": twin, "the SGX plugin": agent} {
		patch := func(p string) error {
			return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}, merge(p))
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
	// Node status: the SGX plugin sets its own node's EPC, and nothing
	// else; not another node's, nor without a token bound to a node.
	statusRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sgx-default-status"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}}}}
	statusBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sgx-default-status"}, Subjects: agentBinding.Subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "sgx-default-status"}}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}
	for _, o := range []client.Object{statusRole, statusBinding, other} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	onNode := func(name string) client.Client {
		as := rest.CopyConfig(cfg)
		as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:team-a:sgx-default",
			Extra: map[string][]string{"authentication.kubernetes.io/node-name": {name}}}
		c, err := client.New(as, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	status := func(c client.Client, name, p string) error {
		return c.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, merge(p))
	}
	untilRefused(t, "a node's status without a node-bound token", "only the status of the node its pod runs on", func() error {
		return status(agent, probeNode.Name, `{"status":{"capacity":{"sgx.cloister.dev/epc":"1Ti"}}}`)
	})
	own := onNode(node.Name)
	allowed("the SGX plugin setting its node's EPC", status(own, node.Name, `{"status":{"capacity":{"sgx.cloister.dev/epc":"64Mi"}}}`))
	forbidden("the SGX plugin setting another node's EPC", status(onNode(other.Name), node.Name, `{"status":{"capacity":{"sgx.cloister.dev/epc":"1Ti"}}}`), "only the status of the node its pod runs on")
	forbidden("the SGX plugin without a node-bound token", status(agent, node.Name, `{"status":{"capacity":{"sgx.cloister.dev/epc":"1Ti"}}}`), "only the status of the node its pod runs on")
	forbidden("the SGX plugin raising its node's pods", status(own, node.Name, `{"status":{"capacity":{"pods":"1000"}}}`), "only sgx.cloister.dev/epc")
	forbidden("the SGX plugin moving its node's address", status(own, node.Name, `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.1"}]}}`), "and nothing else of its status")
	allowed("the SGX plugin removing its node's EPC", status(own, node.Name, `{"status":{"capacity":{"sgx.cloister.dev/epc":null}}}`))
	// The operator holds nodes/status only to grant it to the plugin.
	for who, c := range map[string]client.Client{"the operator": op, "its twin": twin} {
		forbidden(who+" setting a node's EPC", status(c, node.Name, `{"status":{"capacity":{"sgx.cloister.dev/epc":"1Ti"}}}`), "only the status of the node its pod runs on")
	}

	var after corev1.Node
	if err := admin.Get(ctx, client.ObjectKeyFromObject(node), &after); err != nil {
		t.Fatal(err)
	}
	if after.Labels["zone"] != "a" || after.Spec.Unschedulable || len(after.Annotations) != 0 {
		t.Errorf("the node changed: %v %v %v", after.Labels, after.Spec.Unschedulable, after.Annotations)
	}
	// A namespace's administrator (cluster-admin bound in it) holds the
	// marker there too, as everything: not the operator.
	nsAdmin := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin", Namespace: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "tenant-admin"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"}}
	if err := admin.Create(ctx, nsAdmin); err != nil {
		t.Fatal(err)
	}
	allowed("a namespace's administrator writing in it", impersonate(t, cfg, "tenant-admin").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "tenant"}}))
	// Other identities, an administrator's included, are not the
	// policies' business.
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "team-a"}},
		testCronJob("kube-system", "admin-job", nil),
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Errorf("the admin writing %s: %v", o.GetName(), err)
		}
	}
}

// untilRefused retries try until the API server refuses it, saying says:
// an admission policy is enforced only once the server's informers have it.
func untilRefused(t *testing.T, what, says string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := try()
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), says) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy never refused %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func testDeployment(ns, name string, labels map[string]string) *appsv1.Deployment {
	ds := testDaemonSet(ns, name, labels)
	return &appsv1.Deployment{ObjectMeta: ds.ObjectMeta, Spec: appsv1.DeploymentSpec{Selector: ds.Spec.Selector, Template: ds.Spec.Template}}
}

func testCronJob(ns, name string, labels map[string]string) *batchv1.CronJob {
	ds := testDaemonSet(ns, name, labels)
	tmpl := ds.Spec.Template
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.CronJob{ObjectMeta: ds.ObjectMeta, Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *",
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}}
}

func testPDB(ns, name string, labels map[string]string) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
}

func testEvent(ns, name, apiVersion, kind, about string) *eventsv1.Event {
	return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		EventTime: metav1.NowMicro(), ReportingController: "cloister-operator", ReportingInstance: "cloister-operator-0",
		Action: "Check", Reason: "Checked", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: about}}
}
