package install

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DCAPSecretName is the Secret install keeps the Intel DCAP API key in;
// a CAS that fetches Intel collateral mounts it (spec.collateral).
const DCAPSecretName = "cloister-dcap-api" //nolint:gosec // a Secret's name, not a credential

// DCAPSecretKey is the key of the Secret's data that holds the API key.
const DCAPSecretKey = "dcap-api-key" //nolint:gosec // a data key's name, not a credential

// WriteDCAPKey creates or updates the DCAP API key's Secret in namespace.
// Errors name the Secret, never the key.
func WriteDCAPKey(ctx context.Context, c client.Client, namespace, key string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DCAPSecretName, Namespace: namespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "cloister"}}}
	var live corev1.Secret
	err := c.Get(ctx, client.ObjectKeyFromObject(s), &live)
	switch {
	case apierrors.IsNotFound(err):
		s.Type = corev1.SecretTypeOpaque
		s.Data = map[string][]byte{DCAPSecretKey: []byte(key)}
		err = c.Create(ctx, s)
	case err == nil:
		live.Data = map[string][]byte{DCAPSecretKey: []byte(key)}
		live.Labels = s.Labels
		err = c.Update(ctx, &live)
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s with the DCAP API key: %w", namespace, DCAPSecretName, redactedAPIError(err))
	}
	return nil
}

// redactedAPIError keeps an API server error's status and drops its text,
// which for a refused write may quote the object.
func redactedAPIError(err error) error {
	if s, ok := err.(apierrors.APIStatus); ok {
		return fmt.Errorf("%s (%d)", s.Status().Reason, s.Status().Code)
	}
	return err
}
