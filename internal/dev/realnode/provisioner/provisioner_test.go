package provisioner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// A claim becomes a folder of the node and a local volume pinned to the
// node; deleting it removes the folder and never anything outside.
func TestLocalStorage(t *testing.T) {
	dir := t.TempDir()
	s := &LocalStorage{Dir: dir, Node: "real"}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	opts := controller.ProvisionOptions{StorageClass: &storagev1.StorageClass{}, PVName: "pvc-1", PVC: pvc, SelectedNodeName: "real"}
	pv, state, err := s.Provision(context.Background(), opts)
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatal(state, err)
	}
	path := filepath.Join(dir, "pvc-1")
	if info, err := os.Stat(path); err != nil || !info.IsDir() {
		t.Fatalf("no folder: %v", err)
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if pv.Spec.Local == nil || pv.Spec.Local.Path != path || terms[0].MatchExpressions[0].Values[0] != "real" ||
		pv.Spec.Capacity.Storage().String() != "1Gi" || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("volume %+v", pv.Spec)
	}
	opts.SelectedNodeName = "other"
	if _, _, err := s.Provision(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "serves real only") {
		t.Errorf("a claim for another node: %v", err)
	}
	outside := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: filepath.Join(dir, "..")}}}}
	if err := s.Delete(context.Background(), outside); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("deleting outside the folder: %v", err)
	}
	if err := s.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("folder left: %v", err)
	}
}
