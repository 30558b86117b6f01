package pullsecrets

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

const opNS = "cloister-system"

// operatorIdentity binds the operator's generated RBAC (the chart's
// role.yaml) to a ServiceAccount and returns a config acting as it: the
// controller runs with exactly the rights the operator has.
func operatorIdentity(t *testing.T, admin client.Client, cfg *rest.Config) *rest.Config {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile("../../../../charts/cloister-operator/files/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	var cr rbacv1.ClusterRole
	var r rbacv1.Role
	if err := yaml.Unmarshal(docs[0], &cr); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(docs[1], &r); err != nil || r.Namespace != opNS {
		t.Fatalf("the Role: %v %q", err, r.Namespace)
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "cloister-operator", Namespace: opNS}
	for _, o := range []client.Object{
		&cr, &r,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "op"}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: opNS}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: r.Name}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + opNS + ":cloister-operator"}
	return as
}

func TestCopies(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{})
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{opNS, "team-a", "team-b"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	as := operatorIdentity(t, admin, cfg)
	// The operator's own cache: secrets of its namespace only.
	mgr, err := ctrl.NewManager(as, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Namespaces: map[string]cache.Config{opNS: {}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(mgr, &Reconciler{Client: mgr.GetClient(), Namespace: opNS}); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Error(err)
		}
	}()

	pull := func(name, token string, shareable bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opNS}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"r":{"auth":"` + token + `"}}}`)}}
		if shareable {
			s.Labels = map[string]string{common.LabelShareable: "true"}
		}
		return s
	}
	src := pull("cloister-pull", "one", true)
	private := pull("private", "secret", false)
	for _, s := range []*corev1.Secret{src, private} {
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// team-b has a secret of its own under the shared name.
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloister-pull", Namespace: "team-b"}, StringData: map[string]string{"mine": "x"}}
	if err := admin.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	ask := func(ns, name string) {
		t.Helper()
		var n corev1.Namespace
		if err := admin.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			t.Fatal(err)
		}
		if name == "" {
			delete(n.Labels, common.LabelPullSecretRequest)
		} else {
			n.Labels[common.LabelPullSecretRequest] = name
		}
		if err := admin.Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	copyIn := func(ns, name string) func() (string, bool) {
		return func() (string, bool) {
			var s corev1.Secret
			err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
			if apierrors.IsNotFound(err) {
				return "", false
			}
			if err != nil {
				t.Fatal(err)
			}
			return string(s.Data[corev1.DockerConfigJsonKey]), true
		}
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not after 20 s: %s", what)
			}
		}
	}
	never := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if cond() {
				t.Fatalf("happened: %s", what)
			}
		}
	}

	ask("team-a", "cloister-pull")
	eventually("a copy in team-a", func() bool {
		d, ok := copyIn("team-a", "cloister-pull")()
		return ok && d == string(src.Data[corev1.DockerConfigJsonKey])
	})

	src.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"r":{"auth":"two"}}}`)
	if err := admin.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	eventually("the copy follows its source", func() bool { d, _ := copyIn("team-a", "cloister-pull")(); return d == `{"auths":{"r":{"auth":"two"}}}` })

	ask("team-a", "private")
	eventually("the old copy removed when the namespace asks for another name", func() bool { _, ok := copyIn("team-a", "cloister-pull")(); return !ok })
	never("a secret not marked shareable is copied", func() bool { _, ok := copyIn("team-a", "private")(); return ok })

	ask("team-a", "cloister-pull")
	eventually("copied again", func() bool { _, ok := copyIn("team-a", "cloister-pull")(); return ok })
	ask("team-a", "")
	eventually("the copy removed when the namespace stops asking", func() bool { _, ok := copyIn("team-a", "cloister-pull")(); return !ok })

	// Removing copies never removes a namespace's own secret of that name.
	ask("team-b", "private")
	never("a namespace's own secret removed", func() bool {
		var s corev1.Secret
		return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(own), &s))
	})

	// The operator reads no secret outside its namespace.
	op, err := client.New(as, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Get(ctx, client.ObjectKeyFromObject(own), &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator read team-b's secret: %v", err)
	}
}
