// Package crd tests the CustomResourceDefinitions controller-gen generates
// from api/ (into the operator chart) against a real API server.
package crd

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

const repoRoot = "../.."

// Where controller-gen writes, relative to the repository: the operator
// chart installs the CRDs and the ClusterRole from there.
const (
	CRDDir  = "charts/cloister-operator/files/crds"
	RBACDir = "charts/cloister-operator/files/rbac"
)

// controllerGenArgs reads CONTROLLER_GEN_ARGS from the Makefile, so the
// test regenerates exactly as `make generate` does.
func controllerGenArgs(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CONTROLLER_GEN_ARGS :=((?:.*\\\n)*.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no CONTROLLER_GEN_ARGS")
	}
	return strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path) //nolint:gosec // copies this repository's own tree for the test
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The committed deepcopy code and CRDs are what the API types generate:
// `make generate` was run after the last change to api/.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	controllerGen := filepath.Join(testenv.AssetsDir(t), "controller-gen")
	work := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"api", "internal", "charts"} {
		copyTree(t, filepath.Join(repoRoot, dir), filepath.Join(work, dir))
	}
	cmd := exec.Command(controllerGen, controllerGenArgs(t)...)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, out)
	}

	compare := func(generated, committed string) {
		want, err := os.ReadFile(generated)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale (%v): run `make generate` and commit the result", committed, err)
		}
	}
	generatedCRDs, _ := filepath.Glob(filepath.Join(work, CRDDir, "*.yaml"))
	committedCRDs, _ := filepath.Glob(filepath.Join(repoRoot, CRDDir, "*.yaml"))
	if len(generatedCRDs) == 0 || len(generatedCRDs) != len(committedCRDs) {
		t.Errorf("controller-gen makes %d CRDs, %s holds %d: run `make generate`", len(generatedCRDs), CRDDir, len(committedCRDs))
	}
	for _, g := range generatedCRDs {
		compare(g, filepath.Join(repoRoot, CRDDir, filepath.Base(g)))
	}
	generatedRBAC, _ := filepath.Glob(filepath.Join(work, RBACDir, "*.yaml"))
	if len(generatedRBAC) == 0 {
		t.Error("controller-gen made no RBAC")
	}
	for _, g := range generatedRBAC {
		compare(g, filepath.Join(repoRoot, RBACDir, filepath.Base(g)))
	}
	deepcopies, _ := filepath.Glob(filepath.Join(work, "api/*/zz_generated.deepcopy.go"))
	more, _ := filepath.Glob(filepath.Join(work, "api/*/*/zz_generated.deepcopy.go"))
	for _, g := range append(deepcopies, more...) {
		rel, _ := filepath.Rel(work, g)
		compare(g, filepath.Join(repoRoot, rel))
	}
}

// What `kubectl explain` shows speaks for itself: no description points at
// the product documents Cloister's kinds were modelled on (by their number
// or as "the seed's"), which users cannot look up.
func TestDescriptionsStandAlone(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, CRDDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", CRDDir, err)
	}
	seed := regexp.MustCompile(`(?i)\bseeds? ?0\d\d\b|\bseed's\b`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			if seed.Match(line) {
				t.Errorf("%s:%d refers to a product document: %s", f, i+1, bytes.TrimSpace(line))
			}
		}
	}
}
