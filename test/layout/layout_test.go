// Package layout checks the shape of the code base that review alone keeps losing: the
// shipping binaries link no test library, product code never imports a test helper, and
// each concern that once had copies (the pod directory, the inotify reader) has one home.
package layout

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
)

const module = "github.com/gcsfuse-csi/gcsfuse-csi"

// testLibraries are import path prefixes that belong to tests only. k8s.io/client-go/testing
// is not here: client-go's own typed clients (gentype) import it, so every client-go user
// links it.
var testLibraries = []string{
	"testing", // the standard library's, and everything under it
	"net/http/httptest",
	"github.com/onsi/",
	"github.com/kubernetes-csi/csi-test",
	"github.com/fsouza/fake-gcs-server",
	"github.com/google/go-containerregistry",
	"github.com/stretchr/testify",
	module + "/internal/testing",
	module + "/test",
}

// toolLibraries are the repository's own tooling: no test library, but no more part of what
// ships than one. internal/readmegen writes and checks the README's generated blocks.
var toolLibraries = []string{module + "/internal/readmegen"}

type goPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// root is the repository's root: go test runs a package's tests in its directory (this
// file's path is no help under -trimpath, which hack/lib.sh sets for every build).
func root(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	return filepath.Join(wd, "..", "..")
}

func goList(t *testing.T, patterns ...string) []goPackage {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list", "-json"}, patterns...)...)
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", patterns, err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %v named no package", patterns)
	}
	return pkgs
}

func isTestLibrary(path string) bool { return within(path, testLibraries) }

// within says whether the import path is one of prefixes or under one.
func within(path string, prefixes []string) bool {
	for _, prefix := range prefixes {
		if path == prefix || strings.HasPrefix(path, strings.TrimSuffix(prefix, "/")+"/") {
			return true
		}
	}
	return false
}

// The binaries that ship (./cmd/...) link no test library: the emulator and the test
// helpers live under test/ and internal/testing/; nor the README tooling.
func TestShippingBinariesLinkNoTestLibrary(t *testing.T) {
	binaries := 0
	for _, p := range goList(t, "./cmd/...") {
		binaries++
		for _, dep := range p.Deps {
			if isTestLibrary(dep) {
				t.Errorf("%s links %s, a test library", p.ImportPath, dep)
			}
			if within(dep, toolLibraries) {
				t.Errorf("%s links %s, the repository's tooling", p.ImportPath, dep)
			}
		}
	}
	if binaries < 4 {
		t.Fatalf("found %d binaries under cmd/, want the node plugin, sidecar, webhook and kubectl plugin", binaries)
	}
}

// No import arrow runs from product code (pkg/, cmd/, non-test files) into a test helper or
// the repository's tooling.
func TestProductImportsNoTestHelper(t *testing.T) {
	for _, p := range goList(t, "./pkg/...", "./cmd/...", "./internal/...") {
		if strings.HasPrefix(p.ImportPath, module+"/internal/testing") || within(p.ImportPath, toolLibraries) {
			continue
		}
		for _, imp := range p.Imports {
			if isTestLibrary(imp) || within(imp, toolLibraries) {
				t.Errorf("%s (product code) imports %s", p.ImportPath, imp)
			}
		}
	}
}

// grepGo returns the packages whose non-test Go files match re, as directories relative to
// the module root.
func grepGo(t *testing.T, re *regexp.Regexp) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	top := root(t)
	err := filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != top {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if re.Match(b) {
			rel, _ := filepath.Rel(top, filepath.Dir(path))
			found[rel] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func wantOnly(t *testing.T, what string, found map[string]bool, home string) {
	t.Helper()
	if !found[home] {
		t.Fatalf("%s: not found in %s at all; the check is looking for the wrong thing", what, home)
	}
	for dir := range found {
		if dir != home {
			t.Errorf("%s: found in %s as well as in %s", what, dir, home)
		}
	}
}

// The pod directory's path elements are spelled in one package.
func TestPodDirectoryHasOneHome(t *testing.T) {
	wantOnly(t, "the kubelet's emptyDir path element", grepGo(t, regexp.MustCompile(`kubernetes\.io~empty-dir`)), "pkg/podfiles")
}

// Inotify is read in one package, pkg/dirwatch: its event parsing, overflow handling,
// polling fallback and the reader's bounds were once copied into a test helper, and the
// copies drift. Tests that need an event the moment it is read use dirwatch.OnEvent. Test
// files are not checked (grepGo skips them): test/integration's probe of a user namespace's
// instance limit makes instances and reads none.
func TestOneInotifyReader(t *testing.T) {
	wantOnly(t, "an inotify instance or watch", grepGo(t, regexp.MustCompile(`\bInotify(Init1?|AddWatch)\b`)), "pkg/dirwatch")
}

// Every metric family of the driver's own code is declared in pkg/metricscatalog, which the
// reference, the dashboard test and the collectors read: a collector or description built
// from options anywhere else would be a family nobody lists. (The controller registers the
// provisioning library's collectors; hack/ and test/ scrape, they declare none.)
func TestMetricsDeclaredOnce(t *testing.T) {
	wantOnly(t, "a Prometheus metric declaration", grepGo(t, regexp.MustCompile(`prometheus\.(New(Counter|Gauge|Histogram|Summary)(Vec|Func)?|NewDesc|(Counter|Gauge|Histogram|Summary)Opts)\b`)), "pkg/metricscatalog")
}

// Every generated block of the repository's Markdown (docs/*.md, CONTRIBUTING.md and the others)
// has well-formed markers: a BEGIN naming the command that writes it and an END of the same
// name, no nesting, no name twice in a file (internal/readmegen.Parse), so that
// hack/readme can replace each and a reader knows how to refresh it. The command must name
// a file or directory of this repository (./bench, hack/scale.sh...), not just anything.
func TestGeneratedBlocksAreWellFormed(t *testing.T) {
	top := root(t)
	inReadme := 0
	err := filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != top {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		rel, _ := filepath.Rel(top, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		blocks, err := readmegen.Parse(string(b))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
		}
		for _, bl := range blocks {
			if !namesRepoPath(top, bl.By) {
				t.Errorf("%s: block %q: its command %q names no file or directory of this repository", rel, bl.Name, bl.By)
			}
		}
		if rel == "docs/performance.md" {
			inReadme = len(blocks)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if inReadme == 0 {
		t.Error("docs/performance.md has no generated block; the check is looking at the wrong thing")
	}
}

// namesRepoPath says whether a word of the command is a path in the repository, once
// stripped of a leading "./" and of trailing punctuation.
func namesRepoPath(top, command string) bool {
	for _, w := range strings.Fields(command) {
		w = strings.TrimRight(strings.TrimPrefix(w, "./"), ",;:")
		if w == "" || strings.Contains(w, "=") || filepath.IsAbs(w) || strings.Contains(w, "..") {
			continue
		}
		if _, err := os.Stat(filepath.Join(top, w)); err == nil {
			return true
		}
	}
	return false
}

// A top-level e2e test that runs beside others says so with parallel(t), never t.Parallel
// alone: parallel(t) also tells hack/e2e.sh that the serial tests are over (the file
// E2E_PARALLEL_STARTED), and the storage suites start beside the tests then. A direct
// t.Parallel in the first such test would leave them waiting for the last test instead, and
// one in a test that resumes before parallel(t) is reached changes nothing, but both read as
// the same thing; one spelling keeps the rule visible. Subtests (function literals) are not
// top-level and keep t.Parallel.
func TestE2ETopLevelParallelMarksThePhase(t *testing.T) {
	dir := filepath.Join(root(t), "test", "e2e")
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no e2e test files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	marked := 0
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			for _, st := range fn.Body.List {
				call, ok := exprCall(st)
				if !ok {
					continue
				}
				switch {
				case isSelectorCall(call, "t", "Parallel"):
					t.Errorf("%s: %s calls t.Parallel(); a top-level e2e test calls parallel(t) (test/e2e/framework_test.go)", fset.Position(call.Pos()), fn.Name.Name)
				case isIdentCall(call, "parallel"):
					marked++
				}
			}
		}
	}
	// The check reads what it means to: the e2e tests do run beside each other.
	if marked == 0 {
		t.Errorf("no top-level e2e test calls parallel(t): the check above found nothing to check")
	}
}

func exprCall(st ast.Stmt) (*ast.CallExpr, bool) {
	es, ok := st.(*ast.ExprStmt)
	if !ok {
		return nil, false
	}
	call, ok := es.X.(*ast.CallExpr)
	return call, ok
}

func isSelectorCall(call *ast.CallExpr, recv, name string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == recv
}

func isIdentCall(call *ast.CallExpr, name string) bool {
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == name
}
