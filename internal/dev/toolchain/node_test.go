package toolchain

import (
	"path/filepath"
	"slices"
	"testing"
)

// Every tool is built from a module that lists it as a tool, so the go
// command has its dependencies pinned in that module's go.sum.
func TestEveryToolIsAModuleTool(t *testing.T) {
	for file, tools := range map[string][]Tool{
		"../../../hack/tools/go.mod":      append(slices.Clone(Tools), Kubelet),
		"../../../hack/nodetools/go.mod":  NodeTools,
		"../../../hack/helmtools/go.mod":  {Helm},
		"../../../hack/linttools/go.mod":  {Lint},
		"../../../hack/vaulttools/go.mod": {Vault},
	} {
		mod := readModFile(t, file)
		var listed []string
		for _, tool := range mod.Tool {
			listed = append(listed, tool.Path)
		}
		for _, tool := range tools {
			if !slices.Contains(listed, tool.Package) {
				t.Errorf("%s does not list %s (tool %s)", file, tool.Package, tool.Name)
			}
		}
	}
}

func TestNodeToolchains(t *testing.T) {
	root := t.TempDir()
	src, _ := filepath.Abs("../../../hack/tools")
	tc := &Toolchain{CacheRoot: root, BinDir: filepath.Join(root, "k8s", KubeVersion, "bin"), SourceDir: src, Tools: Tools}
	kubelet, runtime := tc.Node()
	if kubelet.SourceDir != src || kubelet.BinDir == tc.BinDir || len(kubelet.Tools) != 1 || kubelet.Tools[0].Name != Kubelet.Name {
		t.Errorf("kubelet toolchain %+v", kubelet)
	}
	if runtime.SourceDir != filepath.Join(filepath.Dir(src), "nodetools") || runtime.BinDir != filepath.Join(root, "node", "bin") || len(runtime.Tools) != len(NodeTools) {
		t.Errorf("runtime toolchain %+v", runtime)
	}
	// The kubelet's own stamp: asking for it leaves the control plane's
	// cache as it is.
	if missing, err := kubelet.Missing(); err != nil || len(missing) != 1 {
		t.Errorf("kubelet missing %v, %v", missing, err)
	}
	if missing, err := runtime.Missing(); err != nil || len(missing) != len(NodeTools) {
		t.Errorf("runtime missing %v, %v", missing, err)
	}
	without := *tc
	without.SourceDir = ""
	if k, r := without.Node(); k.SourceDir != "" || r.SourceDir != "" {
		t.Error("no checkout, yet node toolchains have sources")
	}
}
