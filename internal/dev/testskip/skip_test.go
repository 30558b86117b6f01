package testskip

import (
	"os/exec"
	"strings"
	"testing"
)

// testskip stays on the standard library: the device plugins' tests that
// import it are cross-compiled for two other platforms in every make test,
// and a dependency here would be compiled twice more with them.
func TestOnlyTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if deps := strings.Fields(string(out)); len(deps) != 1 {
		t.Errorf("testskip imports %v besides the standard library", deps[:len(deps)-1])
	}
}
