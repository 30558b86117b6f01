package realnode

import (
	"net/netip"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// The real node's cluster DNS: pods resolve Services and a StatefulSet's
// pods by their cluster names (clusterdns), as on a cluster with CoreDNS,
// and nothing else: no lookup of theirs leaves the machine.
const (
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// DNSPodName is the DNS server's static pod.
	DNSPodName = "cluster-dns"
	// DNSUser is its user: it reads Services and EndpointSlices, no more.
	DNSUser = "cloister:cluster-dns"
)

// DNSAddr is where the node's pods send their lookups: the node's address
// on the bridge, port 53.
func (n Network) DNSAddr() netip.AddrPort { return netip.AddrPortFrom(n.NodeIP(), 53) }

// DNSPod is the static pod that runs `cloister dev cluster-dns` from
// Cloister's CLI image on the node's network, answering at listen, with
// served the cluster IPs the node answers at itself.
func DNSPod(image string, listen netip.AddrPort, served []netip.Addr, kubeconfig string) ([]byte, error) {
	fileType := corev1.HostPathFile
	args := []string{"dev", "cluster-dns", "--kubeconfig", kubeconfig, "--listen", listen.String(), "--domain", ClusterDomain}
	for _, a := range served {
		args = append(args, "--served-ip", a.String())
	}
	// Port 53 needs NET_BIND_SERVICE, the only capability.
	return staticPod(DNSPodName, corev1.Container{
		Name: "dns", Image: image, Args: args,
		VolumeMounts: []corev1.VolumeMount{{Name: "kubeconfig", MountPath: kubeconfig, ReadOnly: true}},
	}, []corev1.Capability{"NET_BIND_SERVICE"}, []corev1.Volume{
		{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: kubeconfig, Type: &fileType}}},
	})
}

// writeDNSPod writes the DNS server's kubeconfig (its own certificate)
// and static pod.
func (n *Node) writeDNSPod(ca *CA, image, staticPodDir string) error {
	kubeconfig := filepath.Join(n.Dir, "cluster-dns.kubeconfig")
	if err := n.writeUserKubeconfig(ca, DNSUser, kubeconfig); err != nil {
		return err
	}
	manifest, err := DNSPod(image, n.Network.DNSAddr(), []netip.Addr{n.Network.Service}, kubeconfig)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(staticPodDir, DNSPodName+".yaml"), manifest, 0o600)
}
