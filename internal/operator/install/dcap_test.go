package install

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator"
)

// The key is kept in its Secret, replaced by a later one, and never in an
// error, even one the API server built from the object.
func TestDCAPKeySecret(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := CreateNamespace(ctx, c, "dcap-test"); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: "dcap-test", Name: DCAPSecretName}, &s); err != nil {
			t.Fatal(err)
		}
		return string(s.Data[DCAPSecretKey])
	}
	const first, second = "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"
	for _, key := range []string{first, second} {
		if err := WriteDCAPKey(ctx, c, "dcap-test", key); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != key {
			t.Errorf("the Secret holds %q, want the key written", got)
		}
	}
	refusing := interceptor.NewClient(c, interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, DCAPSecretName, field.ErrorList{field.Invalid(field.NewPath("data"), first, "refused")})
	}})
	err = WriteDCAPKey(ctx, refusing, "dcap-other", first)
	if err == nil || strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), "Secret dcap-other/"+DCAPSecretName) {
		t.Errorf("a refused write: %v", err)
	}
}

// ManageNamespace creates a namespace with the label the operator's
// admission policy asks for, and adds it to one that exists, keeping its
// other labels.
func TestManageNamespace(t *testing.T) {
	c, err := client.New(envConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "had", Labels: map[string]string{"team": "a"}}}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"had", "new-one"} {
		if err := ManageNamespace(ctx, c, ns); err != nil {
			t.Fatal(err)
		}
		var got corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &got); err != nil {
			t.Fatal(err)
		}
		if got.Labels[common.LabelManagedNamespace] != "true" {
			t.Errorf("namespace %s: labels %v", ns, got.Labels)
		}
		if ns == "had" && got.Labels["team"] != "a" {
			t.Errorf("namespace %s lost its labels: %v", ns, got.Labels)
		}
	}
}
