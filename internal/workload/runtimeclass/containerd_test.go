package runtimeclass

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/cloister-cc/cloister/internal/dev/realnode"
)

const v2Config = `version = 2
root = "/var/lib/containerd"
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`

func TestHandlerDropInPerVersion(t *testing.T) {
	real := (&realnode.Runtime{Dir: "/x", BinDir: "/bin", SandboxImage: "pause"}).Config()
	for _, tc := range []struct {
		name, config, plugin string
	}{
		{"version 2 (containerd 1.x)", v2Config, "io.containerd.grpc.v1.cri"},
		{"version 3 (containerd 2.x, the real node's)", string(real), "io.containerd.cri.v1.runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version, err := ConfigVersion([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			h, _ := PlatformHandler("snp", ClassName("snp", "v1.0.0"))
			dropIn, err := DropIn(version, h)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Version int
				Plugins map[string]struct {
					Containerd struct {
						Runtimes map[string]struct {
							RuntimeType    string         `toml:"runtime_type"`
							PodAnnotations []string       `toml:"pod_annotations"`
							Options        map[string]any `toml:"options"`
						}
					}
				}
			}
			if _, err := toml.Decode(string(dropIn), &doc); err != nil {
				t.Fatalf("%v\n%s", err, dropIn)
			}
			rt, ok := doc.Plugins[tc.plugin].Containerd.Runtimes[h.Name]
			if doc.Version != version || !ok || rt.RuntimeType != "io.containerd.kata.v2" || rt.PodAnnotations[0] != "io.katacontainers.*" ||
				!strings.HasSuffix(rt.Options["ConfigPath"].(string), "configuration-qemu-snp.toml") {
				t.Errorf("drop-in for version %d:\n%s", version, dropIn)
			}

			glob := "/etc/containerd/conf.d/*.toml"
			out, changed, err := EnsureImport([]byte(tc.config), glob)
			if err != nil || !changed {
				t.Fatalf("adding the import: %v %v", changed, err)
			}
			var before, after map[string]any
			if _, err := toml.Decode(tc.config, &before); err != nil {
				t.Fatal(err)
			}
			if _, err := toml.Decode(string(out), &after); err != nil {
				t.Fatal(err)
			}
			if imports := after["imports"].([]any); len(imports) != 1 || imports[0] != glob {
				t.Errorf("imports %v", after["imports"])
			}
			delete(after, "imports")
			if a, b := mustTOML(t, before), mustTOML(t, after); a != b {
				t.Errorf("the rest of the configuration changed:\n%s\n----\n%s", a, b)
			}
			again, changed, err := EnsureImport(out, glob)
			if err != nil || changed || string(again) != string(out) {
				t.Errorf("second run: changed %v, %v", changed, err)
			}
		})
	}
	if _, err := ConfigVersion([]byte("root = \"/x\"\n")); err == nil || !strings.Contains(err.Error(), "version 0") {
		t.Errorf("a version 1 configuration: %v", err)
	}
	if h, _ := PlatformHandler("sim", ClassName("sim", "v1")); h.RuntimeType != "io.containerd.runc.v2" || h.Name != ClassName("sim", "v1") {
		t.Errorf("sim handler %+v", h)
	}
	if _, err := PlatformHandler("sev", ClassName("sev", "v1")); err == nil {
		t.Error("an unknown platform")
	}
}

func mustTOML(t *testing.T, v any) string {
	var b strings.Builder
	if err := toml.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
