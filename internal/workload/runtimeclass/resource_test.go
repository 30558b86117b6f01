package runtimeclass

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
)

// The dev cluster's sim runtime is a ConfidentialRuntime a user could have
// written: the node's containerd, its node selector, and no status.
func TestSimRuntimeYAML(t *testing.T) {
	data, err := SimRuntimeYAML(common.NodeSelector{"cloister.dev/real-node": "true"}, "/n/etc/containerd/config.toml", "/n/run/containerd.sock")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "status") || strings.Contains(string(data), "creationTimestamp") {
		t.Errorf("more than a user writes:\n%s", data)
	}
	var ccr basev1beta1.ConfidentialRuntime
	if err := yaml.UnmarshalStrict(data, &ccr); err != nil {
		t.Fatal(err)
	}
	if ccr.Kind != "ConfidentialRuntime" || ccr.Name != "sim" || ccr.Spec.Platform != "sim" ||
		ccr.Spec.ContainerdConfig != "/n/etc/containerd/config.toml" || ccr.Spec.ContainerdSocket != "/n/run/containerd.sock" ||
		ccr.Spec.NodeSelector["cloister.dev/real-node"] != "true" {
		t.Errorf("got %+v", ccr)
	}
}
