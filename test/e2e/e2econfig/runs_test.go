package e2econfig

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// CI's runs validate, have distinct names, and each test a run names by a regexp of
// alternatives (^(A|B)$) is a top-level test of test/e2e: a test renamed or removed would
// otherwise drop out of the polling run with everything still green.
func TestCIRunsNameRealTests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "*_test.go"))
	if err != nil || len(files) < 10 {
		t.Fatalf("test/e2e/*_test.go: %v, %v", files, err)
	}
	var tests []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`).FindAllStringSubmatch(string(b), -1) {
			tests = append(tests, m[1])
		}
	}
	var names []string
	for _, r := range CI {
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
		if slices.Contains(names, r.Name) {
			t.Errorf("two CI runs named %q", r.Name)
		}
		names = append(names, r.Name)
		if r.Tests == "" {
			continue
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(r.Tests, "^"), "$"), "("), ")")
		for _, name := range strings.Split(inner, "|") {
			if !slices.Contains(tests, name) {
				t.Errorf("run %q names %s, which is not a top-level test of test/e2e", r.Name, name)
			}
		}
	}
	if len(CI) < 3 {
		t.Fatalf("%d CI runs; want the release, upgrade and polling runs", len(CI))
	}
}

func TestRunValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		run  Run
		want string
	}{
		{Run{Name: "x", FromRelease: true, DeployWith: "kustomize"}, "not with kustomize or an upgrade"},
		{Run{Name: "x", FromRelease: true, UpgradeFrom: "previous"}, "not with kustomize or an upgrade"},
		{Run{Name: "x", GcsfuseItests: true}, "set Conformance too"},
		{Run{Name: "x", Containerd: "1.7"}, "want 2 or 1.6"},
		{Run{Name: "x", Nodes: 5}, "want 1 to 4"},
		{Run{Name: "x", Nodes: 2, Conformance: true}, "storage suites run on one node"},
		{Run{Name: "x", DeployWith: "kubectl"}, "want helm or kustomize"},
		{Run{Name: "x", UpgradeFrom: "v0.1.0"}, "want previous"},
		{Run{Name: "x", Tests: "^(Test"}, "tests"},
		{Run{Name: "x", Nodes: 2, Chaos: "1m", Tests: "^TestJobNever$"}, "do not run TestChaosSoak"},
		{Run{Name: "x", Chaos: "1m"}, "the soak needs two nodes (E2E_NODES=2, hack/chaos.sh), not 1"},
		{Run{Name: "x", Nodes: 2, Chaos: "5s"}, "want a duration of 30s"},
		{Run{Name: "x", Nodes: 2, ChaosFaults: "node-drained"}, "without a chaos soak's length"},
		{Run{}, "a run needs a name"},
	} {
		if err := tc.run.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v; want an error containing %q", tc.run, err, tc.want)
		}
	}
	if _, err := CIRun("nope"); err == nil || !strings.Contains(err.Error(), "release") {
		t.Errorf("CIRun(nope) = %v; want an error listing the runs", err)
	}
}

// Env sets what hack/e2e.sh reads, and only what a run changes from the defaults; every
// E2E_ variable it sets is one the scripts declare (ScriptVariables) or the suite reads
// (Variables: hack/e2e.sh's go test inherits it).
func TestRunEnv(t *testing.T) {
	r := Run{Name: "x", K8sVersion: "1.28.15", Containerd: "1.6", DeployWith: "kustomize", Tests: "^TestA$", Uninstall: true}
	want := []string{"K8S_VERSION=1.28.15", "CONTAINERD=1.6", "DEPLOY_WITH=kustomize", "E2E_RUN=^TestA$", "E2E_UNINSTALL=1"}
	if got := r.Env(); !slices.Equal(got, want) {
		t.Errorf("Env() = %q; want %q", got, want)
	}
	full := Run{Name: "y", FromRelease: true, UpgradeFrom: "previous", Conformance: true, GcsfuseItests: true, PrebuildPrevious: true,
		Nodes: 2, Chaos: "1m", ChaosFaults: "node-drained"}
	for _, kv := range full.Env() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "E2E_") && !slices.Contains(ScriptVariables, name) && !slices.Contains(Names(), name) {
			t.Errorf("Env sets %s, neither a script's variable nor the suite's", name)
		}
	}
	if got := (Run{Name: "z"}).Env(); len(got) != 0 {
		t.Errorf("a run of defaults sets %q", got)
	}
}

// The runs hack/test.sh asks for (e2e_run NAME) are CI's, every CI run is asked for, and
// every variable Env sets is one the scripts read: a renamed CONTAINERD would otherwise turn
// the polling run into a containerd 2 run that still passes.
func TestCIRunsAreTheScriptsRuns(t *testing.T) {
	hack := filepath.Join("..", "..", "..", "hack")
	testSh, err := os.ReadFile(filepath.Join(hack, "test.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	for _, m := range regexp.MustCompile(`(?m)\be2e_run ([a-z0-9-]+) "`).FindAllStringSubmatch(string(testSh), -1) {
		asked = append(asked, m[1])
		if _, err := CIRun(m[1]); err != nil {
			t.Errorf("hack/test.sh: %v", err)
		}
	}
	for _, r := range CI {
		if !slices.Contains(asked, r.Name) {
			t.Errorf("CI's run %q is never run by hack/test.sh (e2e_run %s ...)", r.Name, r.Name)
		}
	}
	var scripts strings.Builder
	for _, f := range []string{"e2e.sh", "lib.sh", "cluster-lib.sh", "deploy.sh", "cluster-up.sh"} {
		b, err := os.ReadFile(filepath.Join(hack, f))
		if err != nil {
			t.Fatal(err)
		}
		scripts.Write(b)
	}
	every := Run{Name: "all", K8sVersion: "1", Nodes: 2, Containerd: "1.6", DeployWith: "helm", FromRelease: true, UpgradeFrom: "previous",
		Tests: "x", Conformance: true, GcsfuseItests: true, PrebuildPrevious: true, Uninstall: true, Chaos: "1m", ChaosFaults: "node-drained"}
	for _, kv := range every.Env() {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(Names(), name) {
			continue // the suite's (E2E_CHAOS): go test reads it, inherited
		}
		if !strings.Contains(scripts.String(), "${"+name) && !strings.Contains(scripts.String(), "$"+name+" ") && !strings.Contains(scripts.String(), "\"$"+name+"\"") {
			t.Errorf("Run.Env sets %s, which hack/e2e.sh and the scripts it sources never read", name)
		}
	}
}
