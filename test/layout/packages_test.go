package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/architecture.md's package table is true: every package under pkg/ has a row, and
// each imports (in its non-test files) only the packages of this module its row names. A new
// dependency between the driver's parts is a change to that table, seen in review.
func TestPackageTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Packages and what each may import")
	if !ok {
		t.Fatal(`docs/architecture.md has no "### Packages and what each may import" table`)
	}
	section, _, _ = strings.Cut(section, "\n\n`")
	names := regexp.MustCompile("`([a-z0-9/_]+)`")
	allowed := map[string][]string{}
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `pkg/") || len(cells) != 3 {
			continue
		}
		rows++
		var may []string
		if strings.TrimSuffix(cells[2], " |") != "nothing" {
			for _, m := range names.FindAllStringSubmatch(cells[2], -1) {
				may = append(may, qualify(m[1]))
			}
		}
		for _, m := range names.FindAllStringSubmatch(cells[0], -1) {
			allowed[m[1]] = may
		}
	}
	if rows < 25 {
		t.Fatalf("found %d package rows in the table; is it still a table of | `pkg/...` | job | may import |?", rows)
	}
	for _, p := range goList(t, "./pkg/...") {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		may, ok := allowed[rel]
		if !ok {
			t.Errorf("%s has no row in docs/architecture.md's package table", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if dep := strings.TrimPrefix(imp, module+"/"); !slices.Contains(may, dep) {
				t.Errorf("%s imports %s, which its row in docs/architecture.md's package table does not name", rel, dep)
			}
		}
	}
}

// qualify turns a table cell's short name (`contract`, `lifecycle/sidecarrule`,
// `internal/backoff`) into the path below the module.
func qualify(name string) string {
	if strings.HasPrefix(name, "internal/") || strings.HasPrefix(name, "pkg/") {
		return name
	}
	return "pkg/" + name
}
