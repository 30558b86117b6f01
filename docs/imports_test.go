package docs

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// subsystemOrder is the order of the subsystem headings in architecture.md.
func subsystemOrder(t *testing.T) []string {
	t.Helper()
	var order []string
	for _, m := range regexp.MustCompile("(?m)^### `internal/([a-z]+)`").FindAllStringSubmatch(readFile(t, "architecture.md"), -1) {
		order = append(order, m[1])
	}
	if len(order) < 5 {
		t.Fatalf("architecture.md has %d subsystem headings", len(order))
	}
	return order
}

// subsystemImports are the imports of the module's production code from one
// subsystem into another: the arrows between subsystems, with one package
// import that makes each.
func subsystemImports(t *testing.T) map[[2]string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const internal = "github.com/cloister-cc/cloister/internal/"
	subsystem := func(pkg string) string {
		rest, ok := strings.CutPrefix(pkg, internal)
		if !ok {
			return ""
		}
		return strings.SplitN(rest, "/", 2)[0]
	}
	edges := map[[2]string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := subsystem(fields[0])
		for _, imp := range fields[1:] {
			if to := subsystem(imp); to != "" && to != from {
				edges[[2]string{from, to}] = strings.TrimPrefix(fields[0], internal) + " imports " + strings.TrimPrefix(imp, internal)
			}
		}
	}
	return edges
}

// Each subsystem imports only the subsystems above it in architecture.md:
// no arrow points back up, so there is no cycle between subsystems.
func TestImportsFollowSubsystemOrder(t *testing.T) {
	order := subsystemOrder(t)
	edges := subsystemImports(t)
	for edge, example := range edges {
		from, to := slices.Index(order, edge[0]), slices.Index(order, edge[1])
		if from < 0 || to < 0 {
			t.Errorf("%s: a subsystem without a heading in architecture.md", example)
			continue
		}
		if to > from {
			t.Errorf("%s: internal/%s comes after internal/%s in architecture.md, so this import points back up; move the package it needs into a subsystem above", example, edge[1], edge[0])
		}
	}
}

// The picture of the subsystems in architecture.md draws exactly the arrows
// the code has.
func TestSubsystemPictureIsTrue(t *testing.T) {
	doc := readFile(t, "architecture.md")
	block := regexp.MustCompile("(?s)```mermaid\n(.*?)```").FindStringSubmatch(doc)
	if block == nil {
		t.Fatal("architecture.md has no mermaid picture of the subsystems")
	}
	drawn := map[[2]string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+) --> (\w+)\s*$`).FindAllStringSubmatch(block[1], -1) {
		drawn[[2]string{m[1], m[2]}] = true
	}
	edges := subsystemImports(t)
	var missing []string
	for edge := range edges {
		if !drawn[edge] {
			missing = append(missing, fmt.Sprintf("    %s --> %s", edge[0], edge[1]))
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("architecture.md's picture lacks these imports; add the lines:\n%s", strings.Join(missing, "\n"))
	}
	for edge := range drawn {
		if _, ok := edges[edge]; !ok {
			t.Errorf("architecture.md's picture draws %s --> %s, which no import makes: remove it", edge[0], edge[1])
		}
	}
}
