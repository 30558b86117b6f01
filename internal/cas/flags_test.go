package cas

import (
	"flag"
	"os"
	"regexp"
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
