package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The sidecar starts on the way to every pod's first mount: no package of ours that it links
// compiles a regular expression at package init (regexp.MustCompile or Compile in a
// package-level var). Counted repetitions ({1,253}) compile to large programs; the
// credentials, mount option, proxy and metric patterns cost ~10 ms of each sidecar's start
// that way. internal/lazyre compiles them at their first use instead.
func TestSidecarCompilesNoPatternAtInit(t *testing.T) {
	pkgs := goList(t, "./cmd/gcsfuse-sidecar")
	var ours []string
	for _, dep := range append(pkgs[0].Deps, pkgs[0].ImportPath) {
		if strings.HasPrefix(dep, module+"/") {
			ours = append(ours, dep)
		}
	}
	checked := 0
	for _, p := range goList(t, ours...) {
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			checked++
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				ast.Inspect(gd, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if ok && (isSelectorCall(call, "regexp", "MustCompile") || isSelectorCall(call, "regexp", "Compile")) {
						t.Errorf("%s: a package-level regexp compiled at init in %s, which the sidecar links: use internal/lazyre", filepath.Base(path), p.ImportPath)
					}
					return true
				})
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d files of the sidecar's packages, want its whole tree", checked)
	}
}
