package layout

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testFrameworks are the modules only the tests' module (test/go.mod) may require.
var testFrameworks = []string{
	"github.com/onsi/ginkgo",
	"github.com/onsi/gomega",
	"github.com/kubernetes-csi/csi-test",
	"github.com/fsouza/fake-gcs-server",
	"github.com/stretchr/testify",
}

// modules returns `go list -m all` run in dir with GOWORK set to gowork ("off": the module
// in dir alone; "": the repository's go.work): module path -> selected version.
func modules(t *testing.T, dir, gowork string) map[string]string {
	t.Helper()
	out := goCmd(t, dir, gowork, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	mods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, version, _ := strings.Cut(line, " ")
		mods[path] = version
	}
	if len(mods) < 10 {
		t.Fatalf("go list -m all in %s listed %d modules: %q", dir, len(mods), out)
	}
	return mods
}

// goCmd runs the go command in dir with GOWORK=gowork and returns its standard output.
func goCmd(t *testing.T, dir, gowork string, args ...string) []byte {
	t.Helper()
	return goCmdEnv(t, dir, gowork, nil, args...)
}

// goCmdEnv is goCmd with more environment (GOOS, GOARCH).
func goCmdEnv(t *testing.T, dir, gowork string, env []string, args ...string) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK="+gowork, "GOFLAGS="), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %v in %s (GOWORK=%q): %v\n%s", args, dir, gowork, err, stderr.String())
	}
	return out
}

// The product module (go.mod at the root, alone) needs no test framework: go.mod requires
// none directly, and no package of the product, its code or its own tests (go list -deps
// -test), imports one; the tests' module (test/go.mod) does, or this check would prove
// nothing. (go.mod still names ginkgo, gomega and testify as "// indirect": the tests of
// kube-openapi and client-go import them, and go mod tidy records what dependencies' tests
// need. Nothing here builds them.)
func TestProductModuleListsNoTestFramework(t *testing.T) {
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(goCmd(t, root(t), "off", "mod", "edit", "-json"), &mod); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	for _, r := range mod.Require {
		if within(r.Path, testFrameworks) && !r.Indirect {
			t.Errorf("go.mod requires %s, a test framework: it belongs in test/go.mod", r.Path)
		}
	}
	pkgs := strings.Fields(string(goCmd(t, root(t), "off", "list", "-deps", "-test", "./...")))
	for _, p := range pkgs {
		if within(p, testFrameworks) {
			t.Errorf("a package of the product module (code or its tests) imports %s, a test framework: move the test to test/", p)
		}
	}
	if len(pkgs) < 100 {
		t.Fatalf("go list -deps -test ./... listed %d packages", len(pkgs))
	}
	tests := modules(t, filepath.Join(root(t), "test"), "off")
	for _, want := range []string{"github.com/onsi/ginkgo/v2", "github.com/kubernetes-csi/csi-test/v5", "github.com/fsouza/fake-gcs-server"} {
		if _, ok := tests[want]; !ok {
			t.Errorf("test/go.mod's go list -m all lacks %s: did the suites stop needing it, or move back into the product module?", want)
		}
	}
}

// The workspace (go.work: the product module and test/) builds every package of the
// product (its code and its own tests, with their dependencies) from the module versions
// the product module selects alone, replacements included, on every platform a release
// builds for, with the same GODEBUG defaults. Otherwise the binaries that the tests build
// and prove (in the workspace) would not be the ones a release builds (GOWORK=off): a test
// framework requiring a newer grpc would upgrade it silently. The fix is to raise the
// version in go.mod too (go get), or to lower test/go.mod's. Modules in the graph that no
// product package comes from may differ.
func TestWorkspaceSelectsTheProductsVersions(t *testing.T) {
	if _, ok := modules(t, root(t), "")[module+"/test"]; !ok {
		t.Fatalf("the workspace lists no %s/test: is go.work at the root, using ./test?", module)
	}
	work, err := os.ReadFile(filepath.Join(root(t), "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go .*$`)
	if w, m := goLine.FindString(string(work)), goLine.FindString(string(mod)); w != m || w == "" {
		t.Errorf("go.work says %q, go.mod %q: the go line sets the language and GODEBUG defaults, keep them equal", w, m)
	}
	if regexp.MustCompile(`(?m)^\s*(replace|godebug|toolchain)\b`).Match(work) {
		t.Errorf("go.work has a replace, godebug or toolchain line: the workspace would build the product otherwise than GOWORK=off")
	}
	const format = "{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}{{end}}"
	for _, platform := range []string{"linux/amd64", "linux/arm64", "darwin/arm64"} {
		goos, goarch, _ := strings.Cut(platform, "/")
		env := []string{"GOOS=" + goos, "GOARCH=" + goarch}
		alone := packageModules(goCmdEnv(t, root(t), "off", env, "list", "-e", "-deps", "-test", "-f", format, "./..."))
		workspace := packageModules(goCmdEnv(t, root(t), "", env, "list", "-e", "-deps", "-test", "-f", format, "./..."))
		for path, version := range alone {
			if got := workspace[path]; got != version {
				t.Errorf("%s, %s: the workspace builds the product with %q, the product module alone with %q", platform, path, got, version)
			}
		}
		if len(alone) < 20 {
			t.Fatalf("%s: the product's packages come from %d modules; want its dependencies listed", platform, len(alone))
		}
	}
	const godebug = "{{.ImportPath}} {{.DefaultGODEBUG}}"
	if a, w := goCmd(t, root(t), "off", "list", "-f", godebug, "./cmd/..."), goCmd(t, root(t), "", "list", "-f", godebug, "./cmd/..."); !bytes.Equal(a, w) {
		t.Errorf("the binaries' GODEBUG defaults differ:\nGOWORK=off:\n%s\nworkspace:\n%s", a, w)
	}
}

// packageModules reads lines "path version[ => replacement]" (go list -f of each package's
// module) into a map.
func packageModules(out []byte) map[string]string {
	mods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			mods[path] = version
		}
	}
	return mods
}
