package install

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// The krew manifest renders, as krew-release-bot renders it, to a krew
// Plugin whose every platform runs this package's plugin binary.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("../../../hack/krew/cloister.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const tag = "v1.2.3"
	var uris []string
	tmpl, err := template.New("krew").Funcs(template.FuncMap{
		// krew-release-bot renders the URI's own template, downloads it and
		// writes uri and sha256.
		"addURIAndSha": func(uri, tag string) string {
			uri = strings.ReplaceAll(uri, "{{ .TagName }}", tag)
			uris = append(uris, uri)
			return "uri: " + uri + "\n    sha256: " + strings.Repeat("ab", 32)
		},
	}).Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]string{"TagName": tag}); err != nil {
		t.Fatal(err)
	}
	var p struct {
		APIVersion, Kind string
		Metadata         struct{ Name string }
		Spec             struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string }
				URI      string
				Sha256   string
				Bin      string
			}
		}
	}
	if err := yaml.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if p.Kind != "Plugin" || p.Metadata.Name != "cloister" || p.Spec.Version != tag || len(p.Spec.Platforms) < 2 {
		t.Fatalf("manifest %+v", p)
	}
	for _, pl := range p.Spec.Platforms {
		if pl.Bin != PluginName || !strings.Contains(pl.URI, tag) || len(pl.Sha256) != 64 || pl.Selector.MatchLabels["os"] == "" {
			t.Errorf("platform %+v", pl)
		}
	}
}
