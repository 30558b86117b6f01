package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxTrackedFile bounds a tracked file: sources, charts and test vectors
// are kilobytes; anything larger is build output or data that belongs in
// the module cache.
const maxTrackedFile = 1 << 20

// The repository tracks sources, never build output: no executable (ELF)
// and no file over 1 MiB. A clone stays small, and a binary built on one
// machine never poses as a source of another.
func TestNoBuildOutputTracked(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		path := filepath.Join("..", string(name))
		st, err := os.Lstat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if st.Size() > maxTrackedFile {
			t.Errorf("%s is tracked and %d bytes (over 1 MiB): build output or data does not belong in git; git rm --cached it and ignore it by a rule", name, st.Size())
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		_ = f.Close()
		if n == 4 && bytes.Equal(head, []byte("\x7fELF")) {
			t.Errorf("%s is a tracked executable: build output does not belong in git; git rm --cached it and ignore it by a rule", name)
		}
	}
}

// Every target of the Makefile says what it does in a "## target:"
// comment, which make help prints.
func TestMakeTargetsAreDescribed(t *testing.T) {
	data, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	var phony []string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, ".PHONY:"); ok {
			phony = append(phony, strings.Fields(rest)...)
		}
	}
	if len(phony) < 10 {
		t.Fatalf("the Makefile's .PHONY names %d targets: %v", len(phony), phony)
	}
	for _, target := range phony {
		if !strings.Contains(text, "\n## "+target+":") {
			t.Errorf("make target %s has no \"## %s: what it does\" comment above it, which make help prints", target, target)
		}
	}
}

// No package of this module that a binary links imports testing: test
// helpers that start real parts (castest, testenv) live in packages only
// tests import, so a daemon does not ship them.
func TestBinariesLinkNoTestHelpers(t *testing.T) {
	const module = "github.com/cloister-cc/cloister/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if !strings.HasPrefix(fields[0], module) {
			continue // a dependency's own choice
		}
		if slices.Contains(fields[1:], "testing") {
			t.Errorf("%s imports testing and a binary links it: move its test helpers into a package only tests import (as internal/cas/castest)", strings.TrimPrefix(fields[0], module))
		}
	}
}
