package attesttest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Provenance is what a folder of real evidence under a verifier's
// testdata/ says of itself in its PROVENANCE.md: where each file comes
// from, under which licence, and the verdict each evidence file must get
// at a given time under a given policy.
type Provenance struct {
	// Dir is the folder; Kind the verifier whose testdata/ holds it
	// ("sgx", "tdx", "snp", "nitro").
	Dir, Kind string
	// Fields are the "- key: value" lines: repository, commit, licence,
	// validity.
	Fields   map[string]string
	Files    []ProvenanceFile
	Verdicts []ProvenanceVerdict
}

// ProvenanceFile is one file of the folder.
type ProvenanceFile struct {
	Name, SHA256, Source string
}

// ProvenanceVerdict is the verdict an evidence file must get.
type ProvenanceVerdict struct {
	// Evidence is the file's name in the folder.
	Evidence string
	// At is the verification time, RFC 3339 or Unix seconds.
	At string
	// Policy is the attestation policy, JSON.
	Policy string
	// Verdict is "accepted" or "rejected: CHECK".
	Verdict string
}

// RequiredFields are the fields every provenance names.
var RequiredFields = []string{"repository", "commit", "licence", "validity"}

// ParseProvenance reads a PROVENANCE.md: its "- key: value" fields, the
// table of files (file | sha256 | path) and the table of verdicts
// (evidence | at | policy | verdict).
func ParseProvenance(text []byte) (*Provenance, error) {
	p := &Provenance{Fields: map[string]string{}}
	var header string
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "- "):
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "- "), ": ")
			if !ok {
				return nil, fmt.Errorf("line %d: want \"- key: value\"", n)
			}
			p.Fields[k] = v
		case strings.HasPrefix(line, "|---"):
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
			}
			if header == "" {
				header = strings.Join(cells, "|")
				continue
			}
			switch {
			case header == "file|sha256|path in the repository" && len(cells) == 3:
				p.Files = append(p.Files, ProvenanceFile{Name: cells[0], SHA256: cells[1], Source: cells[2]})
			case header == "evidence|at|policy|verdict" && len(cells) == 4:
				p.Verdicts = append(p.Verdicts, ProvenanceVerdict{Evidence: cells[0], At: cells[1], Policy: cells[2], Verdict: cells[3]})
			default:
				return nil, fmt.Errorf("line %d: a row of %d cells under the header %q: want the files (file | sha256 | path in the repository) or the verdicts (evidence | at | policy | verdict)", n, len(cells), header)
			}
		default:
			header = "" // a blank line or text ends a table
		}
	}
	for _, f := range RequiredFields {
		if p.Fields[f] == "" {
			return nil, fmt.Errorf("no %q: every provenance names %s", f, strings.Join(RequiredFields, ", "))
		}
	}
	if len(p.Files) == 0 || len(p.Verdicts) == 0 {
		return nil, fmt.Errorf("%d files and %d verdicts: a provenance lists both", len(p.Files), len(p.Verdicts))
	}
	return p, nil
}

// RealEvidence returns every folder of real evidence in the verifiers'
// testdata/ (internal/attest/KIND/testdata/NAME/PROVENANCE.md), failing
// the test on a folder without a provenance that parses.
func RealEvidence(tb testing.TB) []*Provenance {
	tb.Helper()
	dirs, err := filepath.Glob(filepath.Join(root(tb), "internal", "attest", "*", "testdata", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []*Provenance
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || filepath.Base(dir) == "fuzz" {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, "PROVENANCE.md"))
		if err != nil {
			tb.Fatalf("%s: real evidence has a PROVENANCE.md: %v", dir, err)
		}
		p, err := ParseProvenance(text)
		if err != nil {
			tb.Fatalf("%s/PROVENANCE.md: %v", dir, err)
		}
		p.Dir, p.Kind = dir, filepath.Base(filepath.Dir(filepath.Dir(dir)))
		out = append(out, p)
	}
	if len(out) == 0 {
		tb.Fatal("no real evidence under internal/attest/*/testdata")
	}
	return out
}

// Real is the folder of real evidence kind/name (e.g. "snp/oak-turin-v5")
// in the verifiers' testdata/.
func Real(tb testing.TB, kindName string) string {
	tb.Helper()
	kind, name, ok := strings.Cut(kindName, "/")
	if !ok {
		tb.Fatalf("attesttest: real evidence %q: want KIND/NAME", kindName)
	}
	dir := filepath.Join(root(tb), "internal", "attest", kind, "testdata", name)
	if _, err := os.Stat(filepath.Join(dir, "PROVENANCE.md")); err != nil {
		tb.Fatalf("attesttest: real evidence %s: %v", kindName, err)
	}
	return dir
}

// ReadReal is the file name of the folder of real evidence kind/name
// (Real).
func ReadReal(tb testing.TB, kindName, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Real(tb, kindName), name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
