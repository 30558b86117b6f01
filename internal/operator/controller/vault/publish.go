package vault

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

// PolicyItem is the policy's key in the ConfigMap the operator publishes
// it in, for its owners to read and sign.
const PolicyItem = "policy.yaml"

// PolicyConfigMap names the ConfigMap of a Vault's policy.
func PolicyConfigMap(name string) string { return ReleasePrefix + "-" + name + "-policy" }

// owned is the metadata of an object the Vault v owns beside its release.
func owned(v *servicesv1beta1.Vault, name string) metav1.ObjectMeta {
	yes := true
	return metav1.ObjectMeta{Name: name, Namespace: v.Namespace,
		Labels: map[string]string{"app.kubernetes.io/name": "cloister-vault", "app.kubernetes.io/instance": v.Name,
			common.LabelManagedBy: common.ManagedByOperator},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: servicesv1beta1.GroupVersion.String(), Kind: "Vault",
			Name: v.Name, UID: v.UID, Controller: &yes, BlockOwnerDeletion: &yes}}}
}

// publishPolicy writes the Vault's policy, unsigned, where its owners
// read it (the operator never signs a policy), and names it in the
// status with its digest, which the owners' signature covers.
func (k *Kind) publishPolicy(ctx context.Context, v *servicesv1beta1.Vault, c *Confidential, digest string) error {
	doc, err := Policy(v, PolicyInput{Platform: c.Platform, Digest: digest, CAS: c.CAS})
	if err != nil {
		return err
	}
	text, err := sigsyaml.JSONToYAML(doc.Canonical())
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: owned(v, PolicyConfigMap(v.Name)),
		Data:       map[string]string{PolicyItem: "# Sign it: cloister policy sign --key OWNER.pem --cluster " + v.Namespace + "/" + v.Spec.CAS.Name + " " + PolicyItem + "\n" + string(text)},
	}
	if err := service.PatchOrCreate(ctx, k.Writer, cm, cm.Data); err != nil {
		return fmt.Errorf("publishing the Vault's policy (ConfigMap %s/%s): %w", cm.Namespace, cm.Name, err)
	}
	v.Status.Policy, v.Status.PolicyConfigMap, v.Status.PolicyDigest = doc.Name, cm.Name, doc.Digest()
	return nil
}

// RecoverySecret names the Secret of a Vault's sealed recovery keys.
func RecoverySecret(name string) string { return ReleasePrefix + "-" + name + "-recovery" }

// RecoveryItem is the bundle's key in that Secret.
const RecoveryItem = "recovery.json"

// storeRecovery keeps the first replica's recovery bundle: the recovery
// keys sealed to the owners, ciphertext only, checked to be this Vault's.
// The Secret is made once and never read back by the operator.
func (k *Kind) storeRecovery(ctx context.Context, v *servicesv1beta1.Vault, data []byte) error {
	b, err := vaultinit.ParseBundle(data)
	if err != nil {
		return err
	}
	if want := v.Namespace + "/" + v.Name; b.Vault != want || len(b.Shares) != len(v.Spec.Policy.Owners) {
		return fmt.Errorf("the recovery bundle is of Vault %s with %d shares, want %s with %d", b.Vault, len(b.Shares), want, len(v.Spec.Policy.Owners))
	}
	sec := &corev1.Secret{ObjectMeta: owned(v, RecoverySecret(v.Name)), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{RecoveryItem: data}}
	if err := k.Writer.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("keeping the sealed recovery keys (Secret %s/%s): %w", sec.Namespace, sec.Name, err)
	}
	v.Status.RecoveryKeysSecret = sec.Name
	return nil
}
