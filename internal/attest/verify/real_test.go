package verify

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// TestRealEvidenceVerdicts gives every row of every real-evidence
// provenance its verdict, from the project's own testdata/ and with the
// folder as the collateral folder (a VLEK as a file there, as a VCEK).
func TestRealEvidenceVerdicts(t *testing.T) {
	for _, p := range attesttest.RealEvidence(t) {
		typ, err := attest.ParseType(p.Kind)
		if err != nil {
			t.Fatalf("%s: %v", p.Dir, err)
		}
		for _, v := range p.Verdicts {
			t.Run(fmt.Sprintf("%s/%s/%s at %s %s", p.Kind, filepath.Base(p.Dir), v.Evidence, v.At, v.Policy), func(t *testing.T) {
				raw, err := os.ReadFile(filepath.Join(p.Dir, v.Evidence))
				if err != nil {
					t.Fatal(err)
				}
				at, err := ParseTime(v.At)
				if err != nil {
					t.Fatal(err)
				}
				policy, err := attest.ParsePolicy([]byte(v.Policy))
				if err != nil {
					t.Fatal(err)
				}
				c, err := Evidence(attest.Evidence{Type: typ, Raw: raw}, Options{At: at, CollateralDir: p.Dir})
				if err == nil {
					err = policy.Check(c)
				}
				got := "accepted"
				if err != nil {
					got = "rejected: " + string(attest.CheckOf(err))
				}
				if got != v.Verdict {
					t.Errorf("%s, want %s (%v)", got, v.Verdict, err)
				}
				t.Logf("%s: %v", got, err)
			})
		}
	}
}
