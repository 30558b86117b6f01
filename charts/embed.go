// Package charts embeds the Helm charts of the objects the operator owns, one
// chart per service kind. Values come from the CR (see internal/operator/controller);
// the defaults in each values.yaml only make `helm template` work.
package charts

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

//go:embed all:sgxplugin all:cexplugin all:nitroplugin all:las all:cas all:confidentialruntime all:nitroenclavedeployment all:vault all:cloister-operator
var files embed.FS

// Load returns the embedded chart called name.
func Load(name string) (*chart.Chart, error) {
	var buffered []*archive.BufferedFile
	err := fs.WalkDir(files, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		rel := p[len(name)+1:]
		buffered = append(buffered, &archive.BufferedFile{Name: path.Clean(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading embedded chart %s: %w", name, err)
	}
	ch, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("loading embedded chart %s: %w", name, err)
	}
	return ch, nil
}

// Render renders the embedded chart name as release in namespace with
// values, as `helm template` does: template file name to manifest.
func Render(name, release, namespace string, values map[string]any) (map[string]string, error) {
	ch, err := Load(name)
	if err != nil {
		return nil, err
	}
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{Name: release, Namespace: namespace}, common.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values of chart %s: %w", name, err)
	}
	return engine.Render(ch, vals)
}
