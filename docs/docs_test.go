// Package docs holds the documentation of the repository; its test keeps
// architecture.md true to the packages that exist.
package docs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	cmds, err := os.ReadDir("../cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		if cmd.IsDir() && !strings.Contains(text, "`"+cmd.Name()+"`") {
			t.Errorf("binary %s is not in docs/architecture.md", cmd.Name())
		}
	}
}

// maxSubsystems bounds the folders of internal/: each is a subsystem, so a
// new package goes into one of them rather than beside them.
const maxSubsystems = 14

// Every folder of internal/ is a subsystem with a heading of its own in
// architecture.md, and there are few of them.
func TestInternalIsGroupedBySubsystem(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("../internal")
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, e := range entries {
		if !e.IsDir() {
			t.Errorf("internal/%s: only subsystem folders belong in internal/", e.Name())
			continue
		}
		folders = append(folders, e.Name())
		heading := fmt.Sprintf("### `internal/%s`: ", e.Name())
		if !strings.Contains(string(doc), "\n"+heading) {
			t.Errorf("internal/%s has no subsystem heading (%q...) in docs/architecture.md", e.Name(), heading)
		}
	}
	if len(folders) > maxSubsystems {
		t.Errorf("internal/ has %d folders %v, at most %d: put the new package in the subsystem it belongs to", len(folders), folders, maxSubsystems)
	}
}

// The product documents Cloister's kinds were modelled on are not part of
// the repository: code, tests and docs name the behaviour instead of
// pointing at them. (CAS's own root seed keeps its name.)
func TestNoReferencesToProductDocuments(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	ref := regexp.MustCompile(`(?i)\bseeds? ?0\d\d\b|\bTestSeed|\bthe seed's\b`)
	for _, f := range strings.Fields(string(out)) {
		if f == "docs/docs_test.go" || f == "config/crd/generate_test.go" {
			continue // the guards themselves
		}
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			continue // binary, or gone from the work tree
		}
		for i, line := range strings.Split(string(data), "\n") {
			if ref.MatchString(line) {
				t.Errorf("%s:%d refers to a product document; name the behaviour instead: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// One rule names the package a binary starts in: cmd/cloister-<name>
// starts in internal/<name> or internal/<subsystem>/<name> (dashes
// dropped), cmd/cloister in internal/cli. Nothing but its main (and a
// test-helper package that starts it for tests) imports it, so no package
// links a whole daemon for one of its constants.
func TestBinariesStartInTheirOwnPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/cloister-cc/cloister/"
	importers := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			importers[imp] = append(importers[imp], strings.TrimPrefix(f[0], module))
		}
	}
	cmds, err := os.ReadDir("../cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		name := strings.ReplaceAll(strings.TrimPrefix(cmd.Name(), "cloister-"), "-", "")
		if cmd.Name() == "cloister" {
			name = "cli"
		}
		candidates, _ := filepath.Glob(filepath.Join("../internal", name))
		more, _ := filepath.Glob(filepath.Join("../internal", "*", name))
		candidates = append(candidates, more...)
		if len(candidates) == 0 {
			continue // a binary of its own alone, like the pause process
		}
		if len(candidates) > 1 {
			t.Errorf("cmd/%s: more than one package could be its start: %v", cmd.Name(), candidates)
			continue
		}
		pkg := module + strings.TrimPrefix(filepath.ToSlash(candidates[0]), "../")
		for _, by := range importers[pkg] {
			// A test-helper package (castest) starts the daemon for
			// tests; no binary links it (TestBinariesLinkNoTestHelpers).
			if strings.HasSuffix(by, "test") {
				continue
			}
			if by != "cmd/"+cmd.Name() {
				t.Errorf("%s imports %s, where cmd/%s starts: move what it needs into a leaf of the subsystem", by, strings.TrimPrefix(pkg, module), cmd.Name())
			}
		}
		if !slices.Contains(importers[pkg], "cmd/"+cmd.Name()) {
			t.Errorf("cmd/%s does not start in %s", cmd.Name(), strings.TrimPrefix(pkg, module))
		}
	}
}
