package realnode

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestStoragePod(t *testing.T) {
	data, err := StoragePod("example.com/cloister:1", "real", "/n/volumes", "/n/kc")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if !pod.Spec.HostNetwork || strings.Join(c.Args, " ") != "dev storage-provisioner --kubeconfig /n/kc --dir /n/volumes --node real" ||
		len(c.SecurityContext.Capabilities.Drop) != 1 || len(c.SecurityContext.Capabilities.Add) != 0 || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("pod %+v", pod.Spec)
	}
	if c.VolumeMounts[0].MountPath != "/n/volumes" || pod.Spec.Volumes[0].HostPath.Path != "/n/volumes" || !c.VolumeMounts[1].ReadOnly {
		t.Errorf("mounts %+v, volumes %+v", c.VolumeMounts, pod.Spec.Volumes)
	}
}
