package toolchain

import (
	"path/filepath"
	"slices"
)

// Kubelet is built from hack/tools with the control plane's pins, into a
// folder of its own so asking for it does not rebuild the control plane.
var Kubelet = Tool{Name: "kubelet", Package: "k8s.io/kubernetes/cmd/kubelet"}

// NodeTools are built from hack/nodetools: what a real node runs besides
// the kubelet. runc is not among them: one built from its module lacks
// seccomp here; the real node uses Debian's.
var NodeTools = []Tool{
	{Name: "containerd", Package: "github.com/containerd/containerd/v2/cmd/containerd"},
	{Name: "containerd-shim-runc-v2", Package: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"},
	// ctr imports Cloister's images and the pause image into containerd.
	{Name: "ctr", Package: "github.com/containerd/containerd/v2/cmd/ctr"},
	{Name: "bridge", Package: "github.com/containernetworking/plugins/plugins/main/bridge"},
	{Name: "host-local", Package: "github.com/containernetworking/plugins/plugins/ipam/host-local"},
	{Name: "loopback", Package: "github.com/containernetworking/plugins/plugins/main/loopback"},
	// portmap gives pods their hostPorts (LAS at status.hostIP:18766),
	// with nftables rules made by Debian's nft.
	{Name: "portmap", Package: "github.com/containernetworking/plugins/plugins/meta/portmap"},
}

// Node returns the toolchains of a real node: the kubelet's (next to the
// control plane's binaries) and containerd's with the CNI plugins. Ensure
// each; they build only when asked for (a cold build: ~2 min each here).
func (t *Toolchain) Node() (kubelet, runtime *Toolchain) {
	kubelet = &Toolchain{CacheRoot: t.CacheRoot, BinDir: filepath.Join(t.CacheRoot, "k8s", KubeVersion, "node-bin"), Tools: []Tool{Kubelet}}
	runtime = &Toolchain{CacheRoot: t.CacheRoot, BinDir: filepath.Join(t.CacheRoot, "node", "bin"), Tools: NodeTools}
	if t.SourceDir != "" {
		kubelet.SourceDir = t.SourceDir
		runtime.SourceDir = filepath.Join(filepath.Dir(t.SourceDir), "nodetools")
	}
	return kubelet, runtime
}

// Helm is the Helm CLI, built from hack/helmtools at the version of the
// Helm SDK Cloister uses: tests install the operator chart with it as
// users do.
var Helm = Tool{Name: "helm", Package: "helm.sh/helm/v4/cmd/helm"}

// HelmCLI returns the toolchain of the Helm CLI (its own folder and stamp;
// a cold build takes about a minute). Ensure it before use.
func (t *Toolchain) HelmCLI() *Toolchain {
	h := &Toolchain{CacheRoot: t.CacheRoot, BinDir: filepath.Join(t.CacheRoot, "helm", "bin"), Tools: []Tool{Helm}}
	if t.SourceDir != "" {
		h.SourceDir = filepath.Join(filepath.Dir(t.SourceDir), "helmtools")
	}
	return h
}

// Lint is golangci-lint, built from hack/linttools: a module of its own, so
// the linters' dependencies cannot move the versions of the Kubernetes
// build.
var Lint = Tool{Name: "golangci-lint", Package: "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"}

// Linter returns the toolchain of golangci-lint (its own folder and stamp;
// a cold build takes about two minutes). Ensure it before use.
func (t *Toolchain) Linter() *Toolchain {
	l := &Toolchain{CacheRoot: t.CacheRoot, BinDir: filepath.Join(t.CacheRoot, "lint", "bin"), Tools: []Tool{Lint}}
	if t.SourceDir != "" {
		l.SourceDir = filepath.Join(filepath.Dir(t.SourceDir), "linttools")
	}
	return l
}

// Vault is the Vault server, built from hack/vaulttools (HashiCorp Vault
// v1.14.2, MPL-2.0): the Vault resource's tests and the dev cluster run
// it, never a mock of its API.
var Vault = Tool{Name: "vault", Package: "github.com/hashicorp/vault", Patches: slices.Concat([]Patch{{
	Module: "github.com/hashicorp/vault/sdk", File: "framework/backend.go",
	Old: `		// Detect the coding error of attempting to define a CreateOperation without defining an ExistenceCheck
		if p.ExistenceCheck == nil {`,
	New: `		// Not in Vault 1.14's own sdk: its enterprise stubs define a
		// CreateOperation without an ExistenceCheck.
		if false {`,
	Why: "Vault v1.14.2 was released with the sdk of its own tree; the published sdk v0.9.2 it requires panics on the enterprise stubs of its system backend at the first write under sys/",
}},
	// Three parts of Vault are almost half of what a cold build compiles
	// (240 MB of Go source in 2,176 packages; 133 MB in 1,867 without
	// them) and nothing Cloister's Vault uses: the Azure auth method (it
	// links the Microsoft Graph SDK), the Snowflake database plugin
	// (Apache Arrow, a second AWS SDK), and raft's auto-join through cloud
	// providers (the dev cluster's replicas join at fixed addresses).
	deletions("github.com/hashicorp/vault", "helper/builtinplugins/registry.go",
		"the dev cluster's Vault is built without the Azure auth method and the Snowflake database plugin",
		"\tcredAzure \"github.com/hashicorp/vault-plugin-auth-azure\"\n",
		"\t\t\t\"azure\":      {Factory: credAzure.Factory},\n",
		"\tdbSnowflake \"github.com/hashicorp/vault-plugin-database-snowflake\"\n",
		"\t\t\t\"snowflake-database-plugin\":         {Factory: dbSnowflake.New},\n"),
	deletions("github.com/hashicorp/go-discover", "discover.go",
		"the dev cluster's Vault is built without raft auto-join through cloud providers (Kubernetes' stays: Vault adds it itself)",
		discoverImports, discoverProviders),
)}

// discoverImports and discoverProviders are go-discover's cloud providers,
// as its discover.go (pinned by hack/vaulttools) imports and lists them.
const (
	discoverImports = `	"github.com/hashicorp/go-discover/provider/aliyun"
	"github.com/hashicorp/go-discover/provider/aws"
	"github.com/hashicorp/go-discover/provider/azure"
	"github.com/hashicorp/go-discover/provider/digitalocean"
	"github.com/hashicorp/go-discover/provider/gce"
	"github.com/hashicorp/go-discover/provider/linode"
	"github.com/hashicorp/go-discover/provider/mdns"
	"github.com/hashicorp/go-discover/provider/os"
	"github.com/hashicorp/go-discover/provider/packet"
	"github.com/hashicorp/go-discover/provider/scaleway"
	"github.com/hashicorp/go-discover/provider/softlayer"
	"github.com/hashicorp/go-discover/provider/tencentcloud"
	"github.com/hashicorp/go-discover/provider/triton"
	"github.com/hashicorp/go-discover/provider/vsphere"
`
	discoverProviders = `	"aliyun":       &aliyun.Provider{},
	"aws":          &aws.Provider{},
	"azure":        &azure.Provider{},
	"digitalocean": &digitalocean.Provider{},
	"gce":          &gce.Provider{},
	"linode":       &linode.Provider{},
	"mdns":         &mdns.Provider{},
	"os":           &os.Provider{},
	"scaleway":     &scaleway.Provider{},
	"softlayer":    &softlayer.Provider{},
	"tencentcloud": &tencentcloud.Provider{},
	"triton":       &triton.Provider{},
	"vsphere":      &vsphere.Provider{},
	"packet":       &packet.Provider{},
`
)

// VaultServer returns the toolchain of the Vault server (its own folder
// and stamp; a cold build takes about four minutes on 2 cores). Ensure it
// before use.
func (t *Toolchain) VaultServer() *Toolchain {
	v := &Toolchain{CacheRoot: t.CacheRoot, BinDir: filepath.Join(t.CacheRoot, "vault", "bin"), Tools: []Tool{Vault}}
	if t.SourceDir != "" {
		v.SourceDir = filepath.Join(filepath.Dir(t.SourceDir), "vaulttools")
	}
	return v
}
