package realnode

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// writeCA makes a CA the way kwokctl does (RSA, PKCS#1) or as EC (SEC 1)
// and returns its files.
func writeCA(t *testing.T, rsaKey bool) (certFile, keyFile string) {
	t.Helper()
	var key any
	var keyPEM *pem.Block
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key, keyPEM = k, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	} else {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.MarshalECPrivateKey(k)
		key, keyPEM = k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kwok-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	pub := key.(crypto.Signer).Public()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(keyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// The kubelet's certificates chain to the cluster CA: the client one as
// the node's user in system:nodes, the serving one for the node's address.
func TestKubeletCertificates(t *testing.T) {
	for _, rsaKey := range []bool{true, false} {
		ca, err := LoadCA(writeCA(t, rsaKey))
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		parse := func(certPEM []byte) *x509.Certificate {
			block, _ := pem.Decode(certPEM)
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		certPEM, _, err := ca.KubeletClientCert("real")
		if err != nil {
			t.Fatal(err)
		}
		client := parse(certPEM)
		if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client certificate: %v", err)
		}
		if client.Subject.CommonName != "system:node:real" || len(client.Subject.Organization) != 1 || client.Subject.Organization[0] != "system:nodes" {
			t.Errorf("client subject %v", client.Subject)
		}
		certPEM, _, err = ca.KubeletServingCert("real", net.ParseIP("10.250.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		serving := parse(certPEM)
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.250.0.1"}); err != nil {
			t.Errorf("serving certificate for the node address: %v", err)
		}
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.250.0.2"}); err == nil {
			t.Error("serving certificate valid for another address")
		}
	}
	if _, err := LoadCA("/nonexistent/ca.crt", "/nonexistent/ca.key"); err == nil || !strings.Contains(err.Error(), "cluster CA") {
		t.Errorf("missing CA: %v", err)
	}
}

// The kubelet configuration is what kubelet reads, with the settings this
// environment needs.
func TestKubeletConfig(t *testing.T) {
	k := &Kubelet{Dir: "/n/kubelet", NodeName: "real", NodeIP: netip.MustParseAddr("10.250.0.1"),
		PodCIDR: netip.MustParsePrefix("10.250.0.0/24"), RuntimeSocket: "/n/containerd/containerd.sock", DNS: netip.MustParseAddr("10.250.0.1")}
	data, err := k.Config()
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	switch {
	case cfg.Kind != "KubeletConfiguration" || cfg.APIVersion != "kubelet.config.k8s.io/v1beta1":
		t.Errorf("type %s/%s", cfg.APIVersion, cfg.Kind)
	case cfg.FailCgroupV1 == nil || *cfg.FailCgroupV1, cfg.CgroupDriver != "cgroupfs", cfg.FailSwapOn == nil || *cfg.FailSwapOn:
		t.Errorf("cgroup/swap settings: %s", data)
	case cfg.Address != "10.250.0.1" || cfg.ReadOnlyPort != 0 || cfg.HealthzBindAddress != "127.0.0.1":
		t.Errorf("addresses: %s", data)
	case *cfg.Authentication.Anonymous.Enabled || cfg.Authentication.X509.ClientCAFile != "/n/kubelet/pki/ca.crt" || cfg.Authorization.Mode != "Webhook":
		t.Errorf("authentication: %s", data)
	case cfg.ContainerRuntimeEndpoint != "unix:///n/containerd/containerd.sock" || cfg.PodCIDR != "10.250.0.0/24" || cfg.StaticPodPath != k.StaticPodDir():
		t.Errorf("runtime and pods: %s", data)
	case cfg.MakeIPTablesUtilChains == nil || *cfg.MakeIPTablesUtilChains, *cfg.OOMScoreAdj != 0:
		t.Errorf("host changes: %s", data)
	case len(cfg.ClusterDNS) != 1 || cfg.ClusterDNS[0] != "10.250.0.1" || cfg.ClusterDomain != "cluster.local":
		t.Errorf("pods' DNS: %s", data)
	}
	args := strings.Join(k.daemon().Args, " ")
	if !strings.Contains(args, "--root-dir=/n/kubelet/root") || !strings.Contains(args, "--hostname-override=real") {
		t.Errorf("kubelet args %s", args)
	}
}

func TestNetwork(t *testing.T) {
	if err := DefaultNetwork.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    Network
		want string
	}{
		{Network{Bridge: "a-bridge-name-too-long", Node: DefaultNetwork.Node, Service: DefaultNetwork.Service}, "bridge name"},
		{Network{Bridge: "b", Node: netip.MustParsePrefix("10.0.0.0/24"), Service: DefaultNetwork.Service}, "network address"},
		{Network{Bridge: "b", Node: netip.MustParsePrefix("10.0.0.1/30"), Service: DefaultNetwork.Service}, "/28 or wider"},
		{Network{Bridge: "b", Node: DefaultNetwork.Node, Service: netip.MustParseAddr("10.250.0.9")}, "outside the pod subnet"},
	} {
		if err := tc.n.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.n, err, tc.want)
		}
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string
		Plugins    []struct {
			Type, Bridge string
			Backend      string
			Capabilities map[string]bool
			IsGateway    bool
			IPMasq       bool
			IPAM         struct {
				Type, DataDir string
				Ranges        [][]struct{ Subnet, Gateway string }
			}
		}
	}
	if err := json.Unmarshal(DefaultNetwork.CNIConfig("/n/ipam"), &conf); err != nil {
		t.Fatal(err)
	}
	p := conf.Plugins[0]
	if len(conf.Plugins) != 2 || p.Type != "bridge" || p.Bridge != "cloister0" || !p.IsGateway || p.IPMasq ||
		p.IPAM.Type != "host-local" || p.IPAM.DataDir != "/n/ipam" || p.IPAM.Ranges[0][0].Subnet != "10.250.0.0/24" || p.IPAM.Ranges[0][0].Gateway != "10.250.0.1" {
		t.Errorf("CNI config %+v", conf)
	}
	if pm := conf.Plugins[1]; pm.Type != "portmap" || !pm.Capabilities["portMappings"] || pm.Backend != "nftables" {
		t.Errorf("hostPorts need the portmap plugin with the portMappings capability on nftables: %+v", pm)
	}
}

// Connections to the proxy reach the upstream both ways, and the proxy
// stops with its context.
func TestProxyTCP(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = upstream.Close() }()
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				line, _ := bufio.NewReader(c).ReadString('\n')
				if _, err := c.Write([]byte("upstream got " + line)); err != nil {
					t.Error(err)
				}
			}()
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ProxyTCP(ctx, l, upstream.Addr().String()) }()
	for i := range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		reply, _ := bufio.NewReader(c).ReadString('\n')
		_ = c.Close() // a network peer may have closed first
		if reply != "upstream got hello\n" {
			t.Errorf("connection %d: reply %q", i, reply)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ProxyTCP after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ProxyTCP did not stop")
	}
}

func TestProxyPod(t *testing.T) {
	data, err := ProxyPod("ghcr.io/cloister-cc/cloister:v1", "10.251.0.1:443", "127.0.0.1:6443")
	pod := decodePod(t)(data, err)
	c := pod.Spec.Containers[0]
	if !pod.Spec.HostNetwork || c.Image != "ghcr.io/cloister-cc/cloister:v1" || c.ImagePullPolicy != corev1.PullNever ||
		strings.Join(c.Args, " ") != "dev apiserver-proxy --listen 10.251.0.1:443 --upstream 127.0.0.1:6443" ||
		len(c.SecurityContext.Capabilities.Add) != 1 || c.SecurityContext.Capabilities.Add[0] != "NET_BIND_SERVICE" {
		t.Errorf("proxy pod %s", data)
	}
}

// What a part finds missing at its first start is what it removes at
// stop, and nothing else; a later start does not rewrite the record.
func TestRecordMissing(t *testing.T) {
	dir := t.TempDir()
	existing, made := filepath.Join(dir, "existing"), filepath.Join(dir, "made")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "node", "host.json")
	if err := recordMissing(record, []string{existing, made, filepath.Join(made, "sub")}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(made, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(made, "sub", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A second start sees made as existing; the first record stands.
	if err := recordMissing(record, []string{existing, made}); err != nil {
		t.Fatal(err)
	}
	if err := removeRecorded(record); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", made, err)
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("%s removed: %v", existing, err)
	}
	if err := removeRecorded(filepath.Join(dir, "none.json")); err != nil {
		t.Errorf("no record: %v", err)
	}
	// A made folder where another process now serves a socket is theirs.
	shared := filepath.Join(dir, "shared")
	record = filepath.Join(dir, "node", "host2.json")
	if err := recordMissing(record, []string{shared}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(shared, "containerd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := removeRecorded(record); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(shared, "containerd.sock")); err != nil {
		t.Errorf("a served socket in a folder the node made was removed: %v", err)
	}
	_ = l.Close() // a network peer may have closed first
	if err := removeRecorded(record); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(shared); !os.IsNotExist(err) {
		t.Errorf("%s left once nobody serves its socket: %v", shared, err)
	}
}

func TestReadImages(t *testing.T) {
	if _, _, err := findImages(nil); err == nil || !strings.Contains(err.Error(), "make images") {
		t.Errorf("no images: %v", err)
	}
	if got := imageName("ghcr.io/cloister-cc/cloister-pause:v1"); got != "cloister-pause" {
		t.Errorf("imageName = %q", got)
	}
	if got := imageName("localhost:5000/cloister:v1"); got != "cloister" {
		t.Errorf("imageName with a registry port = %q", got)
	}
}
