package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	vaultcontroller "github.com/cloister-cc/cloister/internal/operator/controller/vault"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

// An owner opens their own recovery key of a Vault's bundle, and only
// with their key.
func TestVaultRecoveryKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "owner.pem")
	owner, err := policy.CreateKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(dir, "other.pem")
	if _, err := policy.CreateKeyFile(otherFile); err != nil {
		t.Fatal(err)
	}
	b, err := vaultinit.SealRecovery("shop/secrets", [][]byte{[]byte("cmVjb3Zlcnk=")}, []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(b)
	bundle := filepath.Join(dir, "recovery.json")
	if err := os.WriteFile(bundle, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "vault", "recovery-key", "--key", keyFile, "--bundle", bundle)
	if err != nil || out != "cmVjb3Zlcnk=\n" {
		t.Fatalf("the owner's recovery key: %q %v", out, err)
	}
	if _, _, err := run(t, "vault", "recovery-key", "--key", otherFile, "--bundle", bundle); err == nil || !strings.Contains(err.Error(), "no recovery key of owner") {
		t.Errorf("another key: %v", err)
	}
	if _, _, err := run(t, "vault", "recovery-key", "--key", keyFile); err == nil || !strings.Contains(err.Error(), "--bundle") {
		t.Errorf("no bundle: %v", err)
	}
}

// An owner makes the Vault's policy from its spec: the one the operator
// makes from the same spec, and a published one that differs is refused.
func TestVaultPolicy(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{"../../charts/cloister-operator/files/crds"}})
	kubeconfig := writeKubeconfig(t, cfg)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, basev1beta1.AddToScheme, servicesv1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := &basev1beta1.ConfidentialRuntime{ObjectMeta: metav1.ObjectMeta{Name: "sim"}, Spec: basev1beta1.ConfidentialRuntimeSpec{Platform: "sim"}}
	if err := c.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	rt.Status.RuntimeClassName = "cloister-cc-sim-v1"
	if err := c.Status().Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	casKey, _ := policy.NewKey()
	cas := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cas"}, Spec: servicesv1beta1.CASSpec{Simulation: true}}
	if err := c.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	cas.Status.SimulationKey = string(policy.MarshalPublicKey(&casKey.PublicKey))
	if err := c.Status().Update(ctx, cas); err != nil {
		t.Fatal(err)
	}
	owner, _ := policy.NewKey()
	v := &servicesv1beta1.Vault{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "secrets"}, Spec: servicesv1beta1.VaultSpec{
		CAS: servicesv1beta1.VaultCAS{Name: "cas"}, RuntimeClassName: "cloister-cc-sim-v1", Replicas: 3,
		Policy: servicesv1beta1.VaultPolicy{Owners: []string{string(policy.MarshalPublicKey(&owner.PublicKey))}},
	}}
	v.Spec.Image = "registry.example/vault@sha256:" + strings.Repeat("1", 64)
	if err := c.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	initializer := "registry.example/cloister-initializer@sha256:" + strings.Repeat("2", 64)
	out, _, err := run(t, "vault", "policy", "default/secrets", "--kubeconfig", kubeconfig, "--initializer-image", initializer)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policy.Parse([]byte(out))
	if err != nil {
		t.Fatalf("the printed policy: %v\n%s", err, out)
	}
	want, err := vaultcontroller.Render(ctx, c, v, initializer)
	if err != nil || doc.Digest() != want.Digest() || doc.Name != "default/secrets" {
		t.Fatalf("the policy %s %s, want the operator's way's %v %v", doc.Name, doc.Digest(), want, err)
	}
	v.Status.PolicyDigest = strings.Repeat("f", 64)
	if err := c.Status().Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "vault", "policy", "default/secrets", "--kubeconfig", kubeconfig, "--initializer-image", initializer); err == nil || !strings.Contains(err.Error(), "sign neither") {
		t.Errorf("another published policy: %v", err)
	}
}
