package realnode

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestStoragePod(t *testing.T) {
	pod := decodePod(t)(StoragePod("example.com/cloister:1", "real", "/n/volumes", "/n/kc"))
	c := pod.Spec.Containers[0]
	if !pod.Spec.HostNetwork || strings.Join(c.Args, " ") != "dev storage-provisioner --kubeconfig /n/kc --dir /n/volumes --node real" ||
		len(c.SecurityContext.Capabilities.Drop) != 1 || len(c.SecurityContext.Capabilities.Add) != 0 || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("pod %+v", pod.Spec)
	}
	if c.VolumeMounts[0].MountPath != "/n/volumes" || pod.Spec.Volumes[0].HostPath.Path != "/n/volumes" || !c.VolumeMounts[1].ReadOnly {
		t.Errorf("mounts %+v, volumes %+v", c.VolumeMounts, pod.Spec.Volumes)
	}
}

func TestDNSPod(t *testing.T) {
	pod := decodePod(t)(DNSPod("example.com/cloister:1", DefaultNetwork.DNSAddr(), []netip.Addr{DefaultNetwork.Service}, "/n/dns.kc"))
	c := pod.Spec.Containers[0]
	want := "dev cluster-dns --kubeconfig /n/dns.kc --listen " + DefaultNetwork.NodeIP().String() + ":53 --domain cluster.local --served-ip " + DefaultNetwork.Service.String()
	if !pod.Spec.HostNetwork || strings.Join(c.Args, " ") != want || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		len(c.SecurityContext.Capabilities.Add) != 1 || c.SecurityContext.Capabilities.Add[0] != "NET_BIND_SERVICE" {
		t.Errorf("pod %+v", pod.Spec)
	}
	if !c.VolumeMounts[0].ReadOnly || pod.Spec.Volumes[0].HostPath.Path != "/n/dns.kc" {
		t.Errorf("mounts %+v, volumes %+v", c.VolumeMounts, pod.Spec.Volumes)
	}
}

// decodePod strictly decodes a static pod's manifest.
func decodePod(t *testing.T) func([]byte, error) corev1.Pod {
	return func(data []byte, err error) corev1.Pod {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(data, &pod); err != nil {
			t.Fatal(err)
		}
		return pod
	}
}
