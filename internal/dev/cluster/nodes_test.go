package cluster

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestDesiredNodeProfiles(t *testing.T) {
	tests := []struct {
		index     int
		name      string
		tee, arch string
		resources map[corev1.ResourceName]int64
		absent    []corev1.ResourceName
	}{
		{0, "sgx-0", "sgx", "amd64", map[corev1.ResourceName]int64{ResourceSGXEnclave: 110, ResourceSGXProvision: 110, corev1.ResourcePods: 110}, []corev1.ResourceName{ResourceNitroEnclaves, ResourceCEXEP11}},
		{1, "snp-1", "snp", "amd64", nil, []corev1.ResourceName{ResourceSGXEnclave, ResourceNitroEnclaves}},
		{2, "tdx-2", "tdx", "amd64", nil, []corev1.ResourceName{ResourceSGXEnclave}},
		{3, "nitro-3", "nitro", "amd64", map[corev1.ResourceName]int64{ResourceNitroEnclaves: 4, ResourceHugePages2Mi: 16 << 30}, []corev1.ResourceName{ResourceSGXEnclave}},
		{4, "cex-4", "cex", "s390x", map[corev1.ResourceName]int64{ResourceCEXEP11: 8}, []corev1.ResourceName{ResourceSGXEnclave}},
		{5, "sgx-5", "sgx", "amd64", map[corev1.ResourceName]int64{ResourceSGXEnclave: 110}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := DesiredNode(tt.index)
			if n.Name != tt.name {
				t.Errorf("name = %q, want %q", n.Name, tt.name)
			}
			if n.Labels[LabelTEE] != tt.tee || n.Labels["cloister.dev/"+tt.tee] != "true" {
				t.Errorf("labels %v lack %s=%s and cloister.dev/%s=true", n.Labels, LabelTEE, tt.tee, tt.tee)
			}
			if n.Labels["kubernetes.io/arch"] != tt.arch || n.Status.NodeInfo.Architecture != tt.arch {
				t.Errorf("arch label %q / nodeInfo %q, want %q", n.Labels["kubernetes.io/arch"], n.Status.NodeInfo.Architecture, tt.arch)
			}
			if n.Annotations[annotationKwokNode] != "fake" {
				t.Errorf("kwok annotation missing: kwok would not drive the node")
			}
			for r, want := range tt.resources {
				for what, list := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
					q, ok := list[r]
					if !ok || q.Value() != want {
						t.Errorf("%s[%s] = %v, want %d", what, r, q.String(), want)
					}
				}
			}
			for _, r := range tt.absent {
				if _, ok := n.Status.Capacity[r]; ok {
					t.Errorf("a %s node advertises %s", tt.tee, r)
				}
			}
			for k, v := range n.Labels {
				if errs := validation.IsQualifiedName(k); len(errs) > 0 {
					t.Errorf("label key %q invalid: %v", k, errs)
				}
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %q value %q invalid: %v", k, v, errs)
				}
			}
		})
	}
}

// Every node of the largest cluster has its own name, IP and pod CIDR, so
// hostPort pods and pod IPs never collide across nodes.
func TestDesiredNodesAreDistinctUpToMaxNodes(t *testing.T) {
	names, ips, cidrs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range MaxNodes {
		n := DesiredNode(i)
		ip := n.Status.Addresses[0].Address
		if _, err := netip.ParseAddr(ip); err != nil {
			t.Fatalf("node %d: address %q: %v", i, ip, err)
		}
		if _, err := netip.ParsePrefix(n.Spec.PodCIDR); err != nil {
			t.Fatalf("node %d: pod CIDR %q: %v", i, n.Spec.PodCIDR, err)
		}
		if names[n.Name] || ips[ip] || cidrs[n.Spec.PodCIDR] {
			t.Fatalf("node %d (%s, %s, %s) repeats an earlier node", i, n.Name, ip, n.Spec.PodCIDR)
		}
		names[n.Name], ips[ip], cidrs[n.Spec.PodCIDR] = true, true, true
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		nodes int
		ok    bool
	}{{-1, false}, {0, false}, {1, true}, {DefaultNodes, true}, {MaxNodes, true}, {MaxNodes + 1, false}} {
		err := ValidateNodes(tt.nodes)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateNodes(%d) = %v, want ok=%v", tt.nodes, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--nodes") {
			t.Errorf("error %q does not name the flag", err)
		}
	}
	for _, tt := range []struct {
		name string
		ok   bool
	}{{"cloister", true}, {"e2e-12", true}, {"", false}, {"Cloister", false}, {"-a", false}, {"a_b", false}, {"a/b", false}, {strings.Repeat("a", 41), false}} {
		err := ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestSummary(t *testing.T) {
	var nodes []corev1.Node
	for i := range 7 {
		nodes = append(nodes, *DesiredNode(i))
	}
	if got, want := Summary(nodes), "sgx=2 snp=2 tdx=1 nitro=1 cex=1"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}
