package charts

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// The operator chart's DRA policies on a real API server: each of
// Cloister's DRA drivers writes only its own driver's ResourceSlices of
// the node its pod runs on, the operator none; and a CryptoExpress config
// set's DeviceClass is claimed only from the namespaces its CEXPlugin
// lists, by a claim or a claim template. Each refusal is one the roles
// alone allow.
func TestDRAAdmission(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{"cloister-operator/files/crds"}})
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}},
		// What the plugin charts give their service accounts.
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "driver"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"*"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "driver"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "driver"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: opNS, Name: "sgx-real"}, {Kind: "ServiceAccount", Namespace: opNS, Name: "nitro-real"}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	op, twin := installRBAC(t, ctx, admin, cfg)
	as := func(user, node string) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + opNS + ":" + user}
		if node != "" {
			c.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		cl, err := client.New(c, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	slice := func(name, driver, node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	}
	sgx := as("sgx-real", "node-1")
	untilRefused(t, "another node's slice", "only the ResourceSlices of the node its pod runs on", func() error {
		return sgx.Create(ctx, slice("probe", "sgx.cloister.dev", "node-2"))
	})
	own := slice("own", "sgx.cloister.dev", "node-1")
	if err := sgx.Create(ctx, own); err != nil {
		t.Fatalf("the SGX driver publishing its node's devices: %v", err)
	}
	refused := func(what string, err error, says string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want refused saying %q", what, err, says)
		}
	}
	refused("the SGX driver publishing Nitro devices", sgx.Create(ctx, slice("nitro", "nitro.cloister.dev", "node-1")), "the sgx driver writes only ResourceSlices of driver sgx.cloister.dev")
	refused("the SGX driver without a node-bound token", as("sgx-real", "").Create(ctx, slice("x", "sgx.cloister.dev", "node-1")), "of the node its pod runs on")
	refused("the Nitro driver deleting the SGX driver's slice", as("nitro-real", "node-1").Delete(ctx, own), "the nitro driver writes only ResourceSlices of driver nitro.cloister.dev")
	refused("the SGX driver on another node deleting it", as("sgx-real", "node-2").Delete(ctx, own), "of the node its pod runs on")
	for who, c := range map[string]client.Client{"the operator": op, "its twin": twin} {
		refused(who+" publishing devices", c.Create(ctx, slice("op", "sgx.cloister.dev", "node-1")), "the operator publishes no devices")
	}
	if err := sgx.Delete(ctx, own); err != nil {
		t.Errorf("the SGX driver withdrawing its node's slice: %v", err)
	}

	plugin := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "base.cloister.dev/v1beta1", "kind": "CEXPlugin", "metadata": map[string]any{"name": "z"},
		"spec": map[string]any{"mode": "DRA", "configSets": []any{
			map[string]any{"name": "ledger", "apqns": []any{map[string]any{"adapter": int64(5), "domain": int64(18)}}, "namespaces": []any{"payments"}},
			map[string]any{"name": "open", "apqns": []any{map[string]any{"adapter": int64(5), "domain": int64(19)}}},
		}}}}
	if err := admin.Create(ctx, plugin); err != nil {
		t.Fatal(err)
	}
	claim := func(ns, name, class string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "hsm", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["cex.cloister.dev"].mode == "ep11"`}}}}}}}}}
	}
	const says = "namespace tenant may not claim CryptoExpress queues of config set ledger (CEXPlugin z lists the namespaces that may)"
	untilRefused(t, "a config set's class from another namespace", says, func() error {
		return admin.Create(ctx, claim("tenant", "probe", "cex-set-ledger.cloister.dev"))
	})
	if err := admin.Create(ctx, claim("payments", "hsm", "cex-set-ledger.cloister.dev")); err != nil {
		t.Errorf("a claim of the set from its namespace: %v", err)
	}
	for _, c := range []*resourceapi.ResourceClaim{claim("tenant", "open", "cex-set-open.cloister.dev"), claim("tenant", "plain", "cex-ep11.cloister.dev")} {
		if err := admin.Create(ctx, c); err != nil {
			t.Errorf("claim %s (a set that lists no namespace, a mode's class): %v", c.Name, err)
		}
	}
	sub := claim("tenant", "first", "cex-ep11.cloister.dev")
	sub.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "hsm", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "plain", DeviceClassName: "cex-ep11.cloister.dev"}, {Name: "set", DeviceClassName: "cex-set-ledger.cloister.dev"}}}
	refused("a claim naming the set among its alternatives", admin.Create(ctx, sub), says)
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "hsm", Namespace: "tenant"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim("tenant", "", "cex-set-ledger.cloister.dev").Spec}}
	refused("a claim template of the set from another namespace", admin.Create(ctx, tmpl), says)
}

// A config set named like a mode gets a DeviceClass of its own: the
// operator chart's mode classes and a CEXPlugin's set classes never share
// a name (Helm would refuse to install the CEXPlugin's release).
func TestDeviceClassNamesDoNotClash(t *testing.T) {
	classes := map[string]string{}
	for key := range renderOperatorIn(t, opNS, map[string]any{}) {
		if name, ok := strings.CutPrefix(key, "DeviceClass/"); ok {
			classes[name] = "the operator chart"
		}
	}
	if len(classes) != 6 {
		t.Fatalf("the operator chart ships %d DeviceClasses, want 6: %v", len(classes), classes)
	}
	var sets []any
	for _, mode := range []string{"ep11", "cca", "accel"} {
		sets = append(sets, map[string]any{"name": mode, "resource": "ibm.com/cex-ep11-" + mode})
	}
	out, err := Render("cexplugin", "cex-z", opNS, map[string]any{"mode": "DRA", "configSets": "{}", "configSetClasses": sets})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, manifest := range out {
		for _, doc := range strings.Split(manifest, "\n---\n") {
			if !strings.Contains(doc, "kind: DeviceClass") {
				continue
			}
			_, rest, _ := strings.Cut(doc, "\n  name: ")
			name, _, _ := strings.Cut(rest, "\n")
			n++
			if who, ok := classes[name]; ok {
				t.Errorf("config set class %s is also %s's", name, who)
			}
		}
	}
	if n != 3 {
		t.Errorf("the CEXPlugin's release ships %d set classes, want 3", n)
	}
}
