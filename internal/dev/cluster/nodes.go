package cluster

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/cluster/netplan"
)

// Labels and annotations the dev cluster puts on its simulated nodes.
const (
	// LabelTEE names the node's trusted execution environment.
	LabelTEE = tee.LabelTEE
	// LabelManagedBy marks nodes that `cloister dev up` owns and may delete.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedByValue = "cloister-dev"
	// kwok's controller only drives nodes carrying this annotation.
	annotationKwokNode = "kwok.x-k8s.io/node"
)

// Extended resources the device plugins of Cloister register on real nodes,
// and the hugepages Nitro hosts reserve.
const (
	ResourceSGXEnclave    corev1.ResourceName = tee.SGXEnclave
	ResourceSGXProvision  corev1.ResourceName = tee.SGXProvision
	ResourceNitroEnclaves corev1.ResourceName = tee.NitroEnclaves
	ResourceCEXEP11       corev1.ResourceName = tee.CEXPrefix + "ep11"
	ResourceHugePages2Mi  corev1.ResourceName = corev1.ResourceHugePagesPrefix + "2Mi"
)

// maxPods is kubelet's default; the SGX plugin's capacitySGXPods defaults to it.
const maxPods = 110

// Profile is what one kind of TEE host looks like to the scheduler.
type Profile struct {
	TEE       string
	Arch      string
	Resources map[corev1.ResourceName]int64
}

// Profiles are assigned round-robin, so any cluster of five or more nodes has
// one host of every kind and a three-node cluster has SGX, SEV-SNP and TDX.
var Profiles = []Profile{
	{TEE: "sgx", Arch: "amd64", Resources: map[corev1.ResourceName]int64{
		ResourceSGXEnclave: maxPods, ResourceSGXProvision: maxPods}},
	{TEE: "snp", Arch: "amd64"},
	{TEE: "tdx", Arch: "amd64"},
	// Nitro hosts reserve hugepages for their enclaves' memory.
	{TEE: "nitro", Arch: "amd64", Resources: map[corev1.ResourceName]int64{
		ResourceNitroEnclaves: 4, ResourceHugePages2Mi: 16 << 30}},
	// CryptoExpress adapters exist on IBM Z only.
	{TEE: "cex", Arch: "s390x", Resources: map[corev1.ResourceName]int64{
		ResourceCEXEP11: 8}},
}

// MaxNodes bounds --nodes: the address plan holds this many nodes, and
// kwok has been measured here with a thousand.
const MaxNodes = netplan.MaxNodes

// NodeName is the name of the i-th node: its TEE and index, e.g. "sgx-0".
func NodeName(i int) string {
	return fmt.Sprintf("%s-%d", Profiles[i%len(Profiles)].TEE, i)
}

// DesiredNode is the i-th simulated node as `dev up` creates it, status included:
// kwok keeps the capacity and allocatable it finds and adds conditions.
func DesiredNode(i int) *corev1.Node {
	p := Profiles[i%len(Profiles)]
	name := NodeName(i)
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	for r, n := range p.Resources {
		resources[r] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	podCIDR := netplan.SimPodCIDR(i).String()
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     p.Arch,
				"type":                   "kwok",
				LabelTEE:                 p.TEE,
				tee.LabelPrefix + p.TEE:  "true",
				LabelManagedBy:           managedByValue,
				tee.LabelSimulatedNode:   "true",
			},
			Annotations: map[string]string{
				annotationKwokNode:             "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: netplan.SimNodeIP(i).String()},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: p.Arch},
		},
	}
}

// Summary counts nodes per TEE, in Profiles order, e.g. "sgx=2 snp=1 tdx=1".
func Summary(nodes []corev1.Node) string {
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Labels[LabelTEE]]++
	}
	s := ""
	for _, p := range Profiles {
		if count[p.TEE] == 0 {
			continue
		}
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", p.TEE, count[p.TEE])
	}
	return s
}
