package lifecycle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The rules stay pure: this package, lifecycle/sidecarrule and driverpod import no I/O (no os, net,
// syscall, no client or runtime package, no exitcoord or sidecar) and read no clock, so
// that every input is passed in and the tables above say all there is to say. The sidecar
// links lifecycle/sidecarrule, which must not bring Kubernetes types with it.
func TestRulesArePure(t *testing.T) {
	const module = "github.com/gcsfuse-csi/gcsfuse-csi/"
	for _, pkg := range []struct {
		dir     string
		allowed []string
	}{
		{".", []string{"fmt", "slices", "strings", "time", "k8s.io/api/core/v1", "k8s.io/apimachinery/pkg/apis/meta/v1", module + "pkg/contract", module + "pkg/driverpod"}},
		{"sidecarrule", []string{"strings", "time", module + "pkg/contract"}},
		// The classifier Trim keeps the driver's pods by is as pure.
		{"../driverpod", []string{"k8s.io/api/core/v1", module + "pkg/contract"}},
	} {
		files, err := filepath.Glob(filepath.Join(pkg.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", pkg.dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			timeName := ""
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !slices.Contains(pkg.allowed, path) {
					t.Errorf("%s imports %q: the rules take their inputs as arguments (allowed: %q)", name, path, pkg.allowed)
				}
				if path == "time" {
					timeName = "time"
					if imp.Name != nil {
						timeName = imp.Name.Name
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == timeName && timeName != "" {
					switch sel.Sel.Name {
					case "Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker":
						t.Errorf("%s reads the clock or waits (time.%s): times are passed in", name, sel.Sel.Name)
					}
				}
				return true
			})
		}
	}
}
