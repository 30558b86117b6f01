// Package docs holds the documentation of the repository; its test keeps
// architecture.md true to the packages that exist.
package docs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Every package of the module is named in architecture.md (a group like
// `internal/attest/sgx`, `tdx` counts for each), so a new package cannot
// land without saying there what it owns.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-tags", "e2e", "-f", "{{.ImportPath}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/cloister-cc/cloister/"
	text := string(doc)
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module)
		if rel == "docs" || strings.HasPrefix(rel, "cmd/") {
			continue // binaries have their own table
		}
		parent, last := rel, rel
		if i := strings.LastIndex(rel, "/"); i >= 0 {
			parent, last = rel[:i], rel[i+1:]
		}
		named := strings.Contains(text, "`"+rel+"`")
		for _, line := range strings.Split(text, "\n") {
			// A row like "| `internal/attest/sgx`, `tdx`, ... |" names its siblings.
			named = named || (strings.HasPrefix(line, "| `"+parent+"/") && strings.Contains(strings.SplitN(line, " | ", 2)[0], "`"+last+"`"))
		}
		if !named {
			t.Errorf("%s is not named in docs/architecture.md: add a row saying what it owns", rel)
		}
	}
	for _, cmd := range []string{"cloister", "cloister-operator", "cloister-device-plugin", "cloister-las", "cloister-cas", "cloister-pause"} {
		if !strings.Contains(text, "`"+cmd+"`") {
			t.Errorf("binary %s is not in docs/architecture.md", cmd)
		}
	}
}
