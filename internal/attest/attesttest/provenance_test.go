package attesttest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestProvenance holds every folder of real evidence to its provenance:
// each file listed with the sha256 it has, nothing unlisted but the
// provenance and the licence, the licence text present.
func TestProvenance(t *testing.T) {
	for _, p := range RealEvidence(t) {
		t.Run(p.Kind+"/"+filepath.Base(p.Dir), func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(p.Dir, "LICENSE")); err != nil {
				t.Errorf("the licence text (LICENSE) is missing: %v", err)
			}
			listed := []string{"PROVENANCE.md", "LICENSE"}
			for _, f := range p.Files {
				listed = append(listed, f.Name)
				b, err := os.ReadFile(filepath.Join(p.Dir, f.Name))
				if err != nil {
					t.Errorf("%s is listed: %v", f.Name, err)
					continue
				}
				if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != f.SHA256 {
					t.Errorf("%s has sha256 %x, its provenance says %s", f.Name, sum, f.SHA256)
				}
			}
			entries, err := os.ReadDir(p.Dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if !slices.Contains(listed, e.Name()) {
					t.Errorf("%s is not in PROVENANCE.md: every file says where it comes from", e.Name())
				}
			}
			for _, v := range p.Verdicts {
				if !slices.ContainsFunc(p.Files, func(f ProvenanceFile) bool { return f.Name == v.Evidence }) {
					t.Errorf("verdict for %s, which is not a file of the folder", v.Evidence)
				}
			}
		})
	}
}

func TestParseProvenanceRefuses(t *testing.T) {
	const files = "| file | sha256 | path in the repository |\n|---|---|---|\n| a | 00 | x |\n\n"
	const verdicts = "| evidence | at | policy | verdict |\n|---|---|---|---|\n| a | 1 | `{}` | accepted |\n"
	const fields = "- repository: r\n- commit: c\n- licence: MIT\n- validity: v\n"
	for name, tc := range map[string]struct{ text, want string }{
		"no commit":        {strings.Replace(fields, "- commit: c\n", "", 1) + files + verdicts, `no "commit"`},
		"no verdicts":      {fields + files, "0 verdicts"},
		"a stray table":    {fields + "| x | y |\n|---|---|\n| 1 | 2 |\n", "want the files"},
		"a short file row": {fields + "| file | sha256 | path in the repository |\n|---|---|---|\n| a | 00 |\n", "a row of 2 cells"},
	} {
		if _, err := ParseProvenance([]byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	p, err := ParseProvenance([]byte(fields + files + verdicts))
	if err != nil || len(p.Files) != 1 || p.Verdicts[0].Policy != "{}" || p.Fields["licence"] != "MIT" {
		t.Errorf("%+v %v", p, err)
	}
}
