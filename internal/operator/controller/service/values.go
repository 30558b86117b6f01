package service

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
)

// CommonValues are the chart values of the configuration every service CR
// has: image (defaultImage when unset),
// imagePullPolicy, imagePullSecrets, resources, nodeSelector, podAnnotations.
// Values are plain JSON types, as Helm stores and compares them.
func CommonValues(spec *common.ServiceSpec, defaultImage string) (map[string]any, error) {
	image := spec.Image
	if image == "" {
		image = defaultImage
	}
	values := map[string]any{"image": image}
	if spec.ImagePullPolicy != "" {
		values["imagePullPolicy"] = string(spec.ImagePullPolicy)
	}
	for key, v := range map[string]any{
		"imagePullSecrets": spec.ImagePullSecrets,
		"resources":        spec.Resources,
		"nodeSelector":     spec.NodeSelector,
		"podAnnotations":   spec.PodAnnotations,
	} {
		plain, err := Plain(v)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", key, err)
		}
		if plain != nil {
			values[key] = plain
		}
	}
	return values, nil
}

// Plain is v as chart values: the maps, lists and scalars its JSON form
// has, named by its JSON field names.
func Plain(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var plain any
	if err := json.Unmarshal(data, &plain); err != nil {
		return nil, err
	}
	return plain, nil
}

// NamespacedValues is the release namespace and common values of a service
// whose spec names the namespace it runs in (the `namespace` field of
// LAS and SGXPlugin): unset means the operator's namespace.
func NamespacedValues(spec *common.ServiceSpec, namespace, operatorNamespace, defaultImage string) (string, map[string]any, error) {
	if namespace == "" {
		namespace = operatorNamespace
	}
	values, err := CommonValues(spec, defaultImage)
	if err != nil {
		return "", nil, err
	}
	return namespace, values, nil
}

// Base is what every Kind adapter holds; adapters embed it.
type Base struct {
	// Reader reads nodes, pods and other cached objects the kind's
	// metrics come from (the manager's cache).
	Reader       client.Reader
	ChartData    *chart.Chart
	DefaultImage string
}

// Chart is the kind's embedded chart.
func (b *Base) Chart() *chart.Chart { return b.ChartData }

// HostPaths are the node folders the charts mount. Nodes differ: kubelets
// of some distributions keep their root elsewhere, and the dev cluster's
// real node has fake TEE devices in a folder of its own.
type HostPaths struct {
	// DevDir holds the TEE device nodes (sgx_enclave, z90crypt, ...).
	DevDir string
	// KubeletDir is the kubelet's --root-dir (pod-resources is in it).
	// Device plugins register in /var/lib/kubelet/device-plugins whatever
	// it is: the kubelet fixes that path.
	KubeletDir string
	// AESMDir holds the socket of Intel's AESM (aesmd), through which LAS
	// has enclaves' REPORTs quoted.
	AESMDir string
	// SysDir is sysfs: the SGX plugin reads the EPC of its NUMA nodes
	// there, the Nitro plugin the CPUs.
	SysDir string
	// CDIDir is the container runtime's CDI spec folder, where the DRA
	// drivers write what a claim's containers get.
	CDIDir string
}

// DefaultHostPaths are a standard node's.
var DefaultHostPaths = HostPaths{DevDir: "/dev", KubeletDir: "/var/lib/kubelet", AESMDir: "/var/run/aesmd", SysDir: "/sys", CDIDir: "/var/run/cdi"}

// Values are the chart values of the paths; unset ones are the defaults.
func (h HostPaths) Values() map[string]any {
	return map[string]any{
		"devDir":     cmp.Or(h.DevDir, DefaultHostPaths.DevDir),
		"kubeletDir": cmp.Or(h.KubeletDir, DefaultHostPaths.KubeletDir),
		"aesmDir":    cmp.Or(h.AESMDir, DefaultHostPaths.AESMDir),
		"sysDir":     cmp.Or(h.SysDir, DefaultHostPaths.SysDir),
		"cdiDir":     cmp.Or(h.CDIDir, DefaultHostPaths.CDIDir),
	}
}

// Validate checks the paths are absolute and clean (they become hostPath
// volumes and flags).
func (h HostPaths) Validate() error {
	for flag, p := range map[string]string{"--host-dev-dir": h.DevDir, "--host-kubelet-dir": h.KubeletDir, "--host-aesm-dir": h.AESMDir, "--host-sys-dir": h.SysDir, "--host-cdi-dir": h.CDIDir} {
		if p != "" && (!path.IsAbs(p) || path.Clean(p) != p) {
			return fmt.Errorf("%s %q: use an absolute, clean path such as /dev or /var/lib/kubelet", flag, p)
		}
	}
	return nil
}

// ImageTag is the version an image reference names: its tag, else its
// digest, else "latest".
func ImageTag(image string) string {
	if at := strings.LastIndex(image, "@"); at >= 0 {
		digest := strings.TrimPrefix(image[at+1:], "sha256:")
		return digest[:min(12, len(digest))]
	}
	if colon := strings.LastIndex(image, ":"); colon > strings.LastIndex(image, "/") {
		return image[colon+1:]
	}
	return "latest"
}
