package realnode

import (
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
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
	// Root without capabilities: it makes and removes folders of root's
	// volumes folder.
	return staticPod(StoragePodName, corev1.Container{
		Name: "provisioner", Image: image,
		Args: []string{"dev", "storage-provisioner", "--kubeconfig", kubeconfig, "--dir", dir, "--node", node},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "volumes", MountPath: dir},
			{Name: "kubeconfig", MountPath: kubeconfig, ReadOnly: true},
		},
	}, nil, []corev1.Volume{
		{Name: "volumes", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}},
		{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: kubeconfig, Type: &fileType}}},
	})
}

// VolumesDir holds the node's provisioned volumes; Down removes it with
// the node's folder.
func (n *Node) VolumesDir() string { return filepath.Join(n.Dir, "volumes") }

// writeStoragePod writes the provisioner's kubeconfig (its own
// certificate, embedded) and static pod.
func (n *Node) writeStoragePod(ca *CA, image, staticPodDir string) error {
	kubeconfig := filepath.Join(n.Dir, "storage-provisioner.kubeconfig")
	if err := n.writeUserKubeconfig(ca, StorageUser, kubeconfig); err != nil {
		return err
	}
	if err := os.MkdirAll(n.VolumesDir(), 0o711); err != nil { //nolint:gosec // pods must traverse the volumes folder
		return err
	}
	manifest, err := StoragePod(image, n.Name, n.VolumesDir(), kubeconfig)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(staticPodDir, StoragePodName+".yaml"), manifest, 0o600)
}

// writeUserKubeconfig writes a kubeconfig for user, with its own
// certificate of the cluster CA embedded, readable by root alone.
func (n *Node) writeUserKubeconfig(ca *CA, user, file string) error {
	certPEM, keyPEM, err := ca.ClientCert(user)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(n.CACert)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: n.APIServer, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["user"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
	cfg.CurrentContext = "user"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}
