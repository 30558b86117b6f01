// Package provisioner is the dev cluster's real-node storage provisioner:
// claims of its StorageClass become folders of the node, as local volumes
// pinned to the node. It runs as a static pod on the node (cloister dev
// storage-provisioner), on the Kubernetes storage SIG's provisioning
// library; a package of its own so the real node's other code does not
// carry that library.
package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// LocalStorage provisions claims as folders of Dir on Node.
type LocalStorage struct {
	Dir, Node string
}

var _ controller.Provisioner = (*LocalStorage)(nil)

// Provision makes the claim's folder and the local PersistentVolume on the
// node. The folder is the group's: the kubelet gives a local volume the
// pod's fsGroup, so a non-root pod (CAS) writes its database there.
func (s *LocalStorage) Provision(_ context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if opts.SelectedNodeName != "" && opts.SelectedNodeName != s.Node {
		return nil, controller.ProvisioningFinished, fmt.Errorf("claim %s/%s is for node %s; this provisioner serves %s only",
			opts.PVC.Namespace, opts.PVC.Name, opts.SelectedNodeName, s.Node)
	}
	path := filepath.Join(s.Dir, opts.PVName)
	if err := os.MkdirAll(path, 0o770); err != nil { //nolint:gosec // a volume folder pods with fsGroup must write
		return nil, controller.ProvisioningFinished, err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: ptr.Deref(opts.StorageClass.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
			AccessModes:                   opts.PVC.Spec.AccessModes,
			VolumeMode:                    opts.PVC.Spec.VolumeMode,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: opts.PVC.Spec.Resources.Requests[corev1.ResourceStorage]},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{s.Node}}},
			}}}},
		},
	}
	return pv, controller.ProvisioningFinished, nil
}

// Delete removes a volume's folder, never anything outside Dir.
func (s *LocalStorage) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return errors.New("not a local volume of this provisioner")
	}
	path := filepath.Clean(pv.Spec.Local.Path)
	if filepath.Dir(path) != filepath.Clean(s.Dir) || strings.HasPrefix(filepath.Base(path), ".") {
		return fmt.Errorf("volume %s is at %s, outside %s", pv.Name, path, s.Dir)
	}
	return os.RemoveAll(path)
}
