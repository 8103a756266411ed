package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"

	// The packages whose patterns TestLazyPatternsCompile compiles.
	_ "github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	_ "github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	_ "github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	_ "github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	_ "github.com/gcsfuse-csi/gcsfuse-csi/pkg/sidecar"
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
			name := importName(f, "regexp")
			if name == "" {
				continue
			}
			for _, decl := range f.Decls {
				// Package-level vars, and init functions' bodies: both run at every start.
				if fd, ok := decl.(*ast.FuncDecl); ok && (fd.Name.Name != "init" || fd.Recv != nil) {
					continue
				}
				if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok != token.VAR {
					continue
				}
				ast.Inspect(decl, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					for _, fn := range []string{"MustCompile", "Compile", "MustCompilePOSIX", "CompilePOSIX"} {
						if isSelectorCall(call, name, fn) {
							t.Errorf("%s: a regexp compiled at init in %s, which the sidecar links: use internal/lazyre", filepath.Base(path), p.ImportPath)
						}
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

// importName is the name file f uses for import path (its last element unless renamed), or
// "" when f does not import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if strings.Trim(imp.Path.Value, `"`) != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return filepath.Base(path)
	}
	return ""
}

// Every pattern the sidecar's packages hold compiles: init no longer compiles them
// (internal/lazyre), so a typo in one that no test of its package matches would otherwise
// ship and panic at its first use.
func TestLazyPatternsCompile(t *testing.T) {
	n, err := lazyre.CompileAll()
	if err != nil {
		t.Error(err)
	}
	if n < 20 {
		t.Errorf("%d lazy patterns registered; want those of credentials, mountopts, netconf, gcsfusemetrics and sidecar (is a package's import below missing?)", n)
	}
}
