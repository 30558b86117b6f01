package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithInput(t, "", args...)
}

// runWithInput runs the command with input as its standard input.
func runWithInput(t *testing.T, input string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRoot(Streams{In: strings.NewReader(input), Out: &out, Err: &errOut})
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]string
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("version -o json printed %q: %v", out, err)
	}
	if info["version"] == "" || !strings.HasPrefix(info["goVersion"], "go") {
		t.Errorf("version info %v lacks version or goVersion", info)
	}
	if _, _, err := run(t, "version", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("version -o yaml = %v, want an error naming --output", err)
	}
}

// Bad input is refused before anything is built or started, with an error
// that names the flag and the fix.
func TestDevUpRejectsBadInput(t *testing.T) {
	// Should validation be skipped, the empty cache would make `dev up`
	// try to build; with no go on PATH that fails with a different error.
	t.Setenv(toolchain.EnvCacheDir, t.TempDir())
	t.Setenv("PATH", t.TempDir())
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"dev", "up", "--nodes", "0"}, []string{"invalid --nodes 0", "1 to"}},
		{[]string{"dev", "up", "--nodes", "-3"}, []string{"invalid --nodes -3"}},
		{[]string{"dev", "up", "--nodes", "5001"}, []string{"invalid --nodes 5001"}},
		{[]string{"dev", "up", "--nodes", "three"}, []string{`invalid argument "three"`, "--help"}},
		{[]string{"dev", "up", "--frobnicate"}, []string{"unknown flag: --frobnicate", "cloister dev up --help"}},
		{[]string{"dev", "up", "--name", "My_Cluster"}, []string{`invalid --name "My_Cluster"`, "lowercase"}},
		{[]string{"dev", "down", "--name", "../etc"}, []string{`invalid --name "../etc"`}},
		{[]string{"dev", "up", "extra"}, []string{`unknown command "extra"`}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestDevUpWithoutToolsOrGoSaysWhatToDo(t *testing.T) {
	t.Setenv(toolchain.EnvCacheDir, t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, _, err := run(t, "dev", "up", "--nodes", "1")
	if err == nil {
		t.Fatal("dev up with an empty cache and no go succeeded")
	}
	for _, w := range []string{"kube-apiserver", "go command is not on PATH", "install Go", "make tools"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestDevKubeconfigOfMissingCluster(t *testing.T) {
	t.Setenv(toolchain.EnvCacheDir, t.TempDir())
	_, _, err := run(t, "dev", "kubeconfig", "--name", "nosuch")
	if err == nil || !strings.Contains(err.Error(), "cloister dev up --name nosuch") {
		t.Errorf("kubeconfig of a missing cluster = %v, want a hint to run dev up", err)
	}
}

func TestDevDownOfMissingClusterIsANoOp(t *testing.T) {
	t.Setenv(toolchain.EnvCacheDir, t.TempDir())
	_, errOut, err := run(t, "dev", "down", "--name", "nosuch")
	if err != nil || !strings.Contains(errOut, "does not exist") {
		t.Errorf("down of a missing cluster = %v, %q", err, errOut)
	}
}
