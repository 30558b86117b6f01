package cas

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Only the CAS daemon links CAS's store, core and PKI: every other binary
// reaches CAS through the client and the wire types, so a bug in the
// store cannot reach them and they stay small.
func TestOnlyTheDaemonLinksTheStore(t *testing.T) {
	cmds, err := os.ReadDir("../../cmd")
	if err != nil {
		t.Fatal(err)
	}
	server := []string{"go.etcd.io/bbolt", "/internal/cas/store", "/internal/cas/core", "/internal/cas/pki"}
	for _, cmd := range cmds {
		out, err := exec.Command("go", "list", "-deps", "../../cmd/"+cmd.Name()).Output()
		if err != nil {
			t.Fatalf("go list -deps cmd/%s: %v", cmd.Name(), err)
		}
		deps := strings.Fields(string(out))
		for _, s := range server {
			linked := false
			for _, d := range deps {
				linked = linked || strings.HasSuffix(d, s) || d == s
			}
			if want := cmd.Name() == "cloister-cas"; linked != want {
				t.Errorf("cmd/%s links %s: %v, want %v", cmd.Name(), strings.TrimPrefix(s, "/"), linked, want)
			}
		}
	}
}
