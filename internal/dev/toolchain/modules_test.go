package toolchain

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// The modules Cloister, its Kubernetes tools and its node tools all
// require are at one version: Go's build cache then compiles each shared
// package once on a cold start, not once per module (golang.org/x/sys
// alone at two versions would compile nearly every package twice).
func TestModulesShareVersions(t *testing.T) {
	files := []string{"go.mod", "hack/tools/go.mod", "hack/nodetools/go.mod"}
	versions := map[string]map[string]string{} // module path → file → version
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		replaced := map[string]bool{}
		for _, r := range mf.Replace {
			replaced[r.Old.Path] = true
		}
		for _, r := range mf.Require {
			if replaced[r.Mod.Path] {
				continue // a replaced module's version is its replacement's
			}
			if versions[r.Mod.Path] == nil {
				versions[r.Mod.Path] = map[string]string{}
			}
			versions[r.Mod.Path][f] = r.Mod.Version
		}
	}
	var apart []string
	for path, byFile := range versions {
		var seen []string
		for _, v := range byFile {
			if !slices.Contains(seen, v) {
				seen = append(seen, v)
			}
		}
		if len(seen) > 1 {
			apart = append(apart, path+": "+strings.Join(describe(byFile), ", "))
		}
	}
	slices.Sort(apart)
	if len(apart) > 0 {
		t.Errorf("modules at different versions, so a cold build compiles them and what imports them once per module; "+
			"go get the highest version in the other modules (GOWORK=off) and go mod tidy:\n  %s", strings.Join(apart, "\n  "))
	}
}

func describe(byFile map[string]string) []string {
	var out []string
	for f, v := range byFile {
		out = append(out, v+" in "+f)
	}
	slices.Sort(out)
	return out
}
