package service

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Objects a kind writes beside its release (CAS's init token and
// simulation keys, a Vault's policy): patched and created by the kind
// itself, owned by its CR.

// OwnedPatch is a merge patch setting data and the labels of meta: an
// object an older operator made without the managed-by label gets it.
func OwnedPatch(meta metav1.ObjectMeta, data any) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": meta.Labels}, "data": data})
}

// PatchOrCreate sets data and the labels of obj (a ConfigMap or Secret
// whose data is data) where it exists, and creates it where it does not.
func PatchOrCreate(ctx context.Context, w client.Writer, obj client.Object, data any) error {
	patch, err := OwnedPatch(metav1.ObjectMeta{Labels: obj.GetLabels()}, data)
	if err != nil {
		return err
	}
	err = w.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		err = w.Create(ctx, obj)
	}
	return err
}
