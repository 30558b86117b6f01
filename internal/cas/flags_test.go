package cas

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every flag the CAS chart passes is one cloister-cas defines: a chart
// that passed another would leave the CAS pod crash-looping on "flag
// provided but not defined".
func TestChartPassesOnlyDefinedFlags(t *testing.T) {
	tmpl, err := os.ReadFile("../../charts/cas/templates/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
	(&Config{}).AddFlags(fs)
	args := regexp.MustCompile(`(?m)^\s*- --([a-z-]+)`).FindAllStringSubmatch(string(tmpl), -1)
	if len(args) < 4 {
		t.Fatalf("found %d flags in the chart", len(args))
	}
	for _, a := range args {
		if fs.Lookup(a[1]) == nil {
			t.Errorf("the CAS chart passes --%s, which cloister-cas does not define", a[1])
		}
	}
}

func TestStoreFlag(t *testing.T) {
	for _, bad := range []string{"etcd", "kubernetes:", "kubernetes:ns", "kubernetes:/cas", "kubernetes:ns/"} {
		_, err := openStore(t.Context(), Config{Store: bad, StateDir: t.TempDir()}, nil)
		if err == nil || !strings.Contains(err.Error(), "kubernetes:NAMESPACE/NAME") {
			t.Errorf("--store %s: %v", bad, err)
		}
	}
	// Outside a pod, a kubernetes store without a configuration says what
	// it lacks.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := openStore(t.Context(), Config{Store: "kubernetes:ns/cas"}, nil); err == nil || !strings.Contains(err.Error(), "service account") {
		t.Errorf("no service account: %v", err)
	}
	s, err := openStore(t.Context(), Config{Store: "bolt", StateDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}
