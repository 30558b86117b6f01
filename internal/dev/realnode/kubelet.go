package realnode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Kubelet is the node agent, built from the same k8s.io/kubernetes module
// as the control plane. Its root directory (pods, volumes, plugins, the
// pod-resources socket) is inside Dir.
type Kubelet struct {
	// Bin is the kubelet executable.
	Bin string
	// Dir holds config, certificates, root directory and logs.
	Dir      string
	NodeName string
	NodeIP   netip.Addr
	PodCIDR  netip.Prefix
	// Labels are set when the node registers (NodeRestriction allows
	// labels outside kubernetes.io and k8s.io).
	Labels map[string]string
	// APIServer is the control plane's URL; CA signs the kubelet's
	// certificates and authenticates the API server's calls to it.
	APIServer string
	CA        *CA
	// RuntimeSocket is containerd's.
	RuntimeSocket string
	// DNS is the cluster DNS pods are given (port 53), if valid.
	DNS netip.Addr
}

// RootDir is the kubelet's --root-dir.
func (k *Kubelet) RootDir() string { return filepath.Join(k.Dir, "root") }

// StaticPodDir holds manifests the kubelet runs without the API server.
func (k *Kubelet) StaticPodDir() string { return filepath.Join(k.Dir, "manifests") }

// PodResourcesSocket is the kubelet's pod-resources API.
func (k *Kubelet) PodResourcesSocket() string {
	return filepath.Join(k.RootDir(), "pod-resources", "kubelet.sock")
}

func (k *Kubelet) pkiDir() string     { return filepath.Join(k.Dir, "pki") }
func (k *Kubelet) configPath() string { return filepath.Join(k.Dir, "kubelet.yaml") }
func (k *Kubelet) logPath() string    { return filepath.Join(k.Dir, "logs", "kubelet.log") }

// Config is the kubelet's configuration. It reflects where the real node
// runs (a developer's machine or a CI container), not a production node:
// cgroupfs on cgroup v1 or v2 (kubelet 1.35+ refuses v1 unless told), swap
// allowed, eviction only near a full disk, no OOM score change (that needs
// CAP_SYS_RESOURCE), no iptables chains (no kube-proxy). Authentication is
// by client certificates of the cluster CA (the API server's own for logs
// and exec) with the API server deciding what they may do.
func (k *Kubelet) Config() ([]byte, error) {
	pki := k.pkiDir()
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:            k.NodeIP.String(),
		Port:               10250,
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To[int32](10248),
		TLSCertFile:        filepath.Join(pki, "kubelet-serving.crt"),
		TLSPrivateKeyFile:  filepath.Join(pki, "kubelet-serving.key"),
		TLSMinVersion:      "VersionTLS13",
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: filepath.Join(pki, "ca.crt")},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		ContainerRuntimeEndpoint: "unix://" + k.RuntimeSocket,
		StaticPodPath:            k.StaticPodDir(),
		PodLogsDir:               filepath.Join(k.Dir, "pod-logs"),
		PodCIDR:                  k.PodCIDR.String(),
		CgroupDriver:             "cgroupfs",
		FailCgroupV1:             ptr.To(false),
		FailSwapOn:               ptr.To(false),
		OOMScoreAdj:              ptr.To[int32](0),
		MakeIPTablesUtilChains:   ptr.To(false),
		ResolverConfig:           ptr.To("/etc/resolv.conf"),
		ClusterDomain:            ClusterDomain,
		MaxPods:                  110,
		SerializeImagePulls:      ptr.To(false),
		EvictionHard: map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
			"imagefs.available": "1%", "imagefs.inodesFree": "1%",
		},
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		NodeStatusReportFrequency:   metav1.Duration{Duration: 10 * time.Second},
		// A dev node: a changed ConfigMap (an enclave manifest) reaches
		// the pods mounting it within seconds rather than a minute.
		SyncFrequency: metav1.Duration{Duration: 10 * time.Second},
	}
	if k.DNS.IsValid() {
		cfg.ClusterDNS = []string{k.DNS.String()}
	}
	return yaml.Marshal(cfg)
}

// Kubeconfig is the kubelet's credentials for the API server.
func (k *Kubelet) Kubeconfig(certFile, keyFile string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: k.APIServer, CertificateAuthority: filepath.Join(k.pkiDir(), "ca.crt")}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["kubelet"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "kubelet"}
	cfg.CurrentContext = "kubelet"
	return clientcmd.Write(*cfg)
}

func (k *Kubelet) daemon() daemon {
	labels := make([]string, 0, len(k.Labels))
	for key, v := range k.Labels {
		labels = append(labels, key+"="+v)
	}
	sort.Strings(labels)
	args := []string{
		"--config=" + k.configPath(),
		"--kubeconfig=" + filepath.Join(k.Dir, "kubeconfig.yaml"),
		"--root-dir=" + k.RootDir(),
		"--hostname-override=" + k.NodeName,
		"--node-ip=" + k.NodeIP.String(),
	}
	if len(labels) > 0 {
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	return daemon{Bin: k.Bin, Args: args, Env: os.Environ(), Log: k.logPath(), Marker: k.configPath()}
}

// Running reports whether this kubelet runs.
func (k *Kubelet) Running() bool { return len(k.daemon().Running()) > 0 }

// Start writes the configuration and certificates and runs the kubelet;
// one already running is left as it is. Whether the node gets Ready is
// for the caller to watch in the API server.
func (k *Kubelet) Start(ctx context.Context) error {
	d := k.daemon()
	if len(d.Running()) > 0 {
		return nil
	}
	for _, dir := range []string{k.pkiDir(), k.RootDir(), k.StaticPodDir(), filepath.Join(k.Dir, "logs")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(k.pkiDir(), "ca.crt"), k.CA.PEM, 0o644); err != nil { //nolint:gosec // the cluster CA certificate is public
		return err
	}
	certPEM, keyPEM, err := k.CA.KubeletServingCert(k.NodeName, k.NodeIP.AsSlice())
	if err != nil {
		return err
	}
	if _, _, err := writePair(k.pkiDir(), "kubelet-serving", certPEM, keyPEM); err != nil {
		return err
	}
	if certPEM, keyPEM, err = k.CA.KubeletClientCert(k.NodeName); err != nil {
		return err
	}
	certFile, keyFile, err := writePair(k.pkiDir(), "kubelet-client", certPEM, keyPEM)
	if err != nil {
		return err
	}
	kubeconfig, err := k.Kubeconfig(certFile, keyFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(k.Dir, "kubeconfig.yaml"), kubeconfig, 0o600); err != nil {
		return err
	}
	cfg, err := k.Config()
	if err != nil {
		return err
	}
	if err := os.WriteFile(k.configPath(), cfg, 0o600); err != nil {
		return err
	}
	if err := d.Start(); err != nil {
		return err
	}
	// A kubelet that cannot start (a bad flag, a busy port) exits at once.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(500 * time.Millisecond):
	}
	if len(d.Running()) == 0 {
		return fmt.Errorf("the kubelet exited at start; see %s:\n%s", k.logPath(), logTail(k.logPath(), 1500))
	}
	return nil
}

// Stop ends the kubelet; its pods' containers are containerd's to stop.
func (k *Kubelet) Stop() error {
	return k.daemon().Stop(10 * time.Second)
}

// logTail is the end of a log file, for errors that would otherwise only
// say "exited".
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(data))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
