package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/dev/realnode"
)

// The real node's proxy listens where pods look for the API server: the
// `kubernetes` Service's address, which the API server certificate names.
func TestRealNodeServiceAddress(t *testing.T) {
	if realnode.DefaultNetwork.Service != kubernetesServiceIP() {
		t.Errorf("the real node serves the API at %s, the kubernetes Service is %s", realnode.DefaultNetwork.Service, kubernetesServiceIP())
	}
	if !strings.Contains(fmtConfig(t), `kubeApiserverCertSANs: ["10.251.0.1"]`) {
		t.Errorf("the API server certificate does not name the Service address:\n%s", fmtConfig(t))
	}
}

func fmtConfig(t *testing.T) string {
	t.Helper()
	c := &Cluster{Name: "x", Workdir: t.TempDir(), Tools: fakeTools{}}
	if err := c.writeConfig(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(c.configPath())
	return string(data)
}

type fakeTools struct{}

func (fakeTools) Path(name string) string { return "/bin/" + name }

// A cluster whose API server certificate lacks the Service address (made
// by an older cloister) is refused for a real node, with what to do.
func TestCheckRealNodeSupport(t *testing.T) {
	for _, tc := range []struct {
		ips    []net.IP
		config string
		want   string
	}{
		{[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.251.0.1")}, "", ""},
		{[]net.IP{net.ParseIP("127.0.0.1")}, "", "certificate does not name"},
		{[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.251.0.1")}, "kind: KwokctlConfiguration\n", "calls webhooks at Service addresses"},
	} {
		c := &Cluster{Name: "x", Workdir: t.TempDir(), Tools: fakeTools{}}
		if err := c.writeConfig(); err != nil {
			t.Fatal(err)
		}
		if tc.config != "" {
			if err := os.WriteFile(c.configPath(), []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(c.pkiPath("admin.crt")), 0o755); err != nil {
			t.Fatal(err)
		}
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IPAddresses: tc.ips}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err := os.WriteFile(c.pkiPath("admin.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		err := c.checkRealNodeSupport()
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("SANs %v: %v, want %q", tc.ips, err, tc.want)
		}
	}
}

// The API server sends its traffic for nodes, pods and webhooks through the
// cluster's egress proxy, which kwokctl runs from the cluster's copy of
// cloister; a cluster configured before that is told to go down and up.
func TestEgressProxyConfigured(t *testing.T) {
	c := &Cluster{Name: "x", Workdir: t.TempDir(), Tools: fakeTools{}}
	if err := c.writeConfig(); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(c.configPath())
	for _, want := range []string{
		`{key: egress-selector-config-file, value: "` + c.egressConfigPath() + `"}`,
		`binary: "` + c.selfPath() + `"`,
		`args: [dev, egress-proxy, --socket, "` + c.egressSocket() + `"]`,
	} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("the kwokctl configuration lacks %s:\n%s", want, cfg)
		}
	}
	egress, _ := os.ReadFile(c.egressConfigPath())
	for _, want := range []string{"name: cluster", "name: controlplane", "proxyProtocol: HTTPConnect", `udsName: "` + c.egressSocket() + `"`} {
		if !strings.Contains(string(egress), want) {
			t.Errorf("the egress configuration lacks %s:\n%s", want, egress)
		}
	}
	if err := c.checkEgress(); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(c.configPath(), []byte("kind: KwokctlConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.checkEgress(); err == nil || !strings.Contains(err.Error(), "older cloister") || !strings.Contains(err.Error(), "dev down --name x") {
		t.Errorf("an older cluster: %v, want it told to go down and up", err)
	}
}

// Only the cloister binary may become the egress proxy: a test binary
// would run its tests instead.
func TestInstallSelfRefusesAnotherBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Name: "x", Workdir: t.TempDir(), Self: self}
	if err := c.installSelf(); err == nil || !strings.Contains(err.Error(), "is not one") {
		t.Errorf("installing %s: %v, want a refusal", self, err)
	}
	if _, err := os.Stat(c.selfPath()); err == nil {
		t.Error("a refused binary was copied")
	}
	c.Self = ""
	if err := c.installSelf(); err == nil {
		t.Error("no binary: no error")
	}
}

func TestEgressSocketPathFits(t *testing.T) {
	c := &Cluster{Name: "x", Workdir: "/" + strings.Repeat("d", 120), Tools: fakeTools{}}
	if err := c.writeEgressConfig(); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Errorf("a socket path over 107 bytes: %v", err)
	}
}
