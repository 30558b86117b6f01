package vault

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// PolicyItem is the policy's key in the ConfigMap the operator publishes
// it in, for its owners to read and sign.
const PolicyItem = "policy.yaml"

// PolicyConfigMap names the ConfigMap of a Vault's policy.
func PolicyConfigMap(name string) string { return ReleasePrefix + "-" + name + "-policy" }

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
	yes := true
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyConfigMap(v.Name), Namespace: v.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "cloister-vault", "app.kubernetes.io/instance": v.Name,
				common.LabelManagedBy: common.ManagedByOperator},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: servicesv1beta1.GroupVersion.String(), Kind: "Vault",
				Name: v.Name, UID: v.UID, Controller: &yes, BlockOwnerDeletion: &yes}}},
		Data: map[string]string{PolicyItem: "# Sign it: cloister policy sign --key OWNER.pem --cluster " + v.Namespace + "/" + v.Spec.CAS.Name + " " + PolicyItem + "\n" + string(text)},
	}
	if err := service.PatchOrCreate(ctx, k.Writer, cm, cm.Data); err != nil {
		return fmt.Errorf("publishing the Vault's policy (ConfigMap %s/%s): %w", cm.Namespace, cm.Name, err)
	}
	v.Status.Policy, v.Status.PolicyConfigMap, v.Status.PolicyDigest = doc.Name, cm.Name, doc.Digest()
	return nil
}
