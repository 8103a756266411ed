package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ---- reading the source ---------------------------------------------------------------

// parseDir parses the non-test Go files of dir.
func parseDir(dir string) ([]*ast.File, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, af)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Go file in %s", dir)
	}
	return out, nil
}

type constNamesFunc func(name string) bool

// sameNames checks that want, this file's entries, are exactly the package-level constants
// of dir that match.
func (g *gen) sameNames(what, dir string, match constNamesFunc, want []string) error {
	files, err := parseDir(filepath.Join(g.root, dir))
	if err != nil {
		return err
	}
	var have []string
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, sp := range gd.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					if n.IsExported() && match(n.Name) {
						have = append(have, n.Name)
					}
				}
			}
		}
	}
	return differ(what, have, want)
}

// differ says how the names in the code and this file's entries differ.
func differ(what string, inCode, here []string) error {
	code, mine := map[string]bool{}, map[string]bool{}
	for _, n := range inCode {
		code[n] = true
	}
	for _, n := range here {
		mine[n] = true
	}
	var msgs []string
	for _, n := range inCode {
		if !mine[n] {
			msgs = append(msgs, n+" is new: give it an entry in hack/reference (attributes.go, annotations.go, mountoptions.go)")
		}
	}
	for _, n := range here {
		if !code[n] {
			msgs = append(msgs, n+" is gone from the code: drop its entry in hack/reference")
		}
	}
	if len(inCode) == 0 {
		msgs = append(msgs, "none found in the code: hack/reference reads the wrong thing")
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return fmt.Errorf("%s: %s", what, strings.Join(msgs, "; "))
}

// mapKeys returns the string keys of the map literal assigned to the package-level
// variable name in dir, sorted.
func mapKeys(dir, name string) ([]string, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.CompositeLit)
					if !ok {
						return nil, fmt.Errorf("%s in %s is not a map literal", name, dir)
					}
					var keys []string
					for _, e := range lit.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok {
							return nil, fmt.Errorf("%s in %s: an element without a key", name, dir)
						}
						k, err := stringValue(kv.Key, files)
						if err != nil {
							return nil, fmt.Errorf("%s in %s: %w", name, dir, err)
						}
						keys = append(keys, k)
					}
					sort.Strings(keys)
					return keys, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no variable %s in %s", name, dir)
}

// switchCases returns the string cases of the switches on the variable tag in function fn
// of dir, in order.
func switchCases(dir, fn, tag string) ([]string, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	found := false
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != fn || fd.Body == nil {
				continue
			}
			found = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sw, ok := n.(*ast.SwitchStmt)
				if !ok {
					return err == nil
				}
				if id, ok := sw.Tag.(*ast.Ident); !ok || id.Name != tag {
					return true
				}
				for _, st := range sw.Body.List {
					for _, e := range st.(*ast.CaseClause).List {
						s, e2 := stringValue(e, files)
						if e2 != nil {
							err = e2
							return false
						}
						out = append(out, s)
					}
				}
				return true
			})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s.%s: %w", dir, fn, err)
	}
	if !found {
		return nil, fmt.Errorf("no function %s in %s", fn, dir)
	}
	return out, nil
}

// stringValue is the value of a string literal, or of a package-level string constant
// defined by one in files.
func stringValue(e ast.Expr, files []*ast.File) (string, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return strconv.Unquote(e.Value)
		}
	case *ast.Ident:
		for _, f := range files {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, sp := range gd.Specs {
					vs := sp.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if n.Name == e.Name && i < len(vs.Values) {
							return stringValue(vs.Values[i], files)
						}
					}
				}
			}
		}
	}
	return "", fmt.Errorf("%T at %v is not a string literal or constant", e, e.Pos())
}
