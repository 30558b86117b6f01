package realnode

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The real node's storage: a StorageClass (the cluster's default) whose
// claims get a folder of the node as a local volume, so persistence works
// as in a real cluster. Made by a provisioner built on the Kubernetes
// storage SIG's library, run as a static pod on the node.
const (
	// StorageProvisioner is the provisioner's name in the StorageClass.
	StorageProvisioner = "cloister.dev/real-node-local"
	// StorageClassName is the class (the dev cluster's default).
	StorageClassName = "standard"
	// StoragePodName is the provisioner's static pod.
	StoragePodName = "storage-provisioner"
	// StorageUser is the provisioner's user, with its own certificate and
	// only the rights provisioning needs.
	StorageUser = "cloister:storage-provisioner"
)

// StoragePod is the static pod that runs `cloister dev storage-provisioner`
// from Cloister's CLI image, with the volumes folder and its kubeconfig
// mounted at the same paths as on the host.
func StoragePod(image, node, dir, kubeconfig string) ([]byte, error) {
	dirType, fileType := corev1.HostPathDirectoryOrCreate, corev1.HostPathFile
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: StoragePodName, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"app.kubernetes.io/name": StoragePodName, "app.kubernetes.io/part-of": "cloister"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name:            "provisioner",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"dev", "storage-provisioner", "--kubeconfig", kubeconfig, "--dir", dir, "--node", node},
				// Root without capabilities: it makes and removes folders
				// of root's volumes folder.
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                ptr.To[int64](0),
					RunAsNonRoot:             ptr.To(false),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "volumes", MountPath: dir},
					{Name: "kubeconfig", MountPath: kubeconfig, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "volumes", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}},
				{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: kubeconfig, Type: &fileType}}},
			},
		},
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encoding the storage provisioner pod: %w", err)
	}
	return data, nil
}

// VolumesDir holds the node's provisioned volumes; Down removes it with
// the node's folder.
func (n *Node) VolumesDir() string { return filepath.Join(n.Dir, "volumes") }

// writeStoragePod writes the provisioner's kubeconfig (its own
// certificate, embedded) and static pod.
func (n *Node) writeStoragePod(ca *CA, image, staticPodDir string) error {
	certPEM, keyPEM, err := ca.ClientCert(StorageUser)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(n.CACert)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: n.APIServer, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["provisioner"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["provisioner"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "provisioner"}
	cfg.CurrentContext = "provisioner"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Dir, "storage-provisioner.kubeconfig")
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(n.VolumesDir(), 0o711); err != nil {
		return err
	}
	manifest, err := StoragePod(image, n.Name, n.VolumesDir(), kubeconfig)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(staticPodDir, StoragePodName+".yaml"), manifest, 0o600)
}
