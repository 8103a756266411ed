package e2econfig

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestFromEnvReadsEveryVariable(t *testing.T) {
	s, err := FromEnv([]string{
		"HOME=/root", "E2E_KUBECONFIG=/k", "E2E_REQUIRE=1", "E2E_KEEP=1", "E2E_GCS_URL=http://10.0.0.2:14443",
		"E2E_IMAGE_REPO=r.example/team", "E2E_IMAGE_TAG=v1", "E2E_IMAGE_DIGESTS=node=" + digest,
		"E2E_HELM=/bin/helm", "E2E_HELM_CHART=/c.tgz", "E2E_PROMETHEUS=/bin/prometheus", "E2E_NETNS=/run/netns/x",
		"E2E_PREVIOUS_RELEASE=v0.1.0", "E2E_UPGRADE_CMD=up", "E2E_PARALLEL_STARTED=/p", "E2E_DEMO=1",
		"E2E_DEMO_RUNS=3", "E2E_DEMO_MARKDOWN=/m", "E2E_RUN=^TestX$", "E2E_FROM_RELEASE=1", "E2E_NODES=2",
		"E2E_KUBECTL=/bin/kubectl", "E2E_CHAOS=2m", "E2E_CHAOS_MARKDOWN=/c", "E2E_CHAOS_FAULTS=node-drained,backend-503",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Suite{Kubeconfig: "/k", Require: true, Keep: true, GCSURL: "http://10.0.0.2:14443", ImageRepo: "r.example/team",
		ImageTag: "v1", ImageDigests: map[string]string{"node": digest}, Helm: "/bin/helm", HelmChart: "/c.tgz",
		Prometheus: "/bin/prometheus", NetNS: "/run/netns/x", PreviousRelease: "v0.1.0", UpgradeCmd: "up",
		ParallelStarted: "/p", Demo: true, DemoRuns: 3, DemoMarkdown: "/m", Nodes: 2,
		Kubectl: "/bin/kubectl", Chaos: 2 * time.Minute, ChaosMarkdown: "/c", ChaosFaults: []string{"node-drained", "backend-503"}}
	if s.ImageDigests["node"] != digest || len(s.ImageDigests) != 1 {
		t.Errorf("digests %v", s.ImageDigests)
	}
	s.ImageDigests, want.ImageDigests = nil, nil
	if !reflect.DeepEqual(s, want) {
		t.Errorf("FromEnv =\n%+v\nwant\n%+v", s, want)
	}
	if empty, err := FromEnv([]string{"PATH=/bin"}); err != nil || empty.Kubeconfig != "" || empty.Require {
		t.Errorf("no E2E_ variable: %+v, %v; want the zero Suite (the tests skip)", empty, err)
	}
}

// What a person gets wrong by hand is refused by name, never read as "off".
func TestFromEnvRefuses(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"E2E_KUBECONFIG=/k", "E2E_REQUIRED=1"}, "unknown variable E2E_REQUIRED"},
		{[]string{"E2E_KUBECONFIG=/k", "E2E_REQUIRE=true"}, `E2E_REQUIRE="true": want 1`},
		{[]string{"E2E_REQUIRE=1"}, "E2E_KUBECONFIG is not set"},
		{[]string{"E2E_HELM=/bin/helm"}, "both E2E_HELM and E2E_HELM_CHART"},
		{[]string{"E2E_PREVIOUS_RELEASE=v0.1.0"}, "E2E_UPGRADE_CMD"},
		{[]string{"E2E_DEMO_RUNS=0"}, "want a positive number"},
		{[]string{"E2E_NODES=two"}, "want a positive number"},
		{[]string{"E2E_CHAOS=90", "E2E_NODES=2"}, `E2E_CHAOS="90": want a duration of 30s to 1h30m0s`},
		{[]string{"E2E_CHAOS=10s", "E2E_NODES=2"}, "want a duration of 30s"},
		{[]string{"E2E_CHAOS=3h", "E2E_NODES=2"}, "want a duration of 30s"},
		{[]string{"E2E_CHAOS=1m"}, "the soak needs two nodes"},
		{[]string{"E2E_CHAOS_MARKDOWN=/c"}, "E2E_CHAOS (the soak's length) is not"},
		{[]string{"E2E_CHAOS_FAULTS=node-drained"}, "E2E_CHAOS (the soak's length) is not"},
		{[]string{"E2E_CHAOS=1m", "E2E_NODES=2", "E2E_CHAOS_FAULTS=node-drained,,backend-503"}, `no fault ""`},
		{[]string{"E2E_CHAOS=1m", "E2E_NODES=2", "E2E_CHAOS_FAULTS=node-drain"}, `no fault "node-drain"`},
		{[]string{"E2E_IMAGE_DIGESTS=node=sha256:abc"}, "want name=sha256:<64 hex digits>"},
	} {
		if _, err := FromEnv(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromEnv(%q) = %v; want an error containing %q", tc.env, err, tc.want)
		}
	}
}

// Every E2E_ variable the scripts or the tests name is declared here: the suite's own
// (Variables) or a script's (ScriptVariables), so that FromEnv's refusal of unknown names
// never refuses a real one. And the tests read none by hand (os.Getenv), only through Suite.
func TestEveryVariableIsDeclared(t *testing.T) {
	repo := filepath.Join("..", "..", "..")
	// Shell variables local to one script (never in a test's environment).
	local := []string{"E2E_DIR", "E2E_TEST"}
	name := regexp.MustCompile(`\bE2E_[A-Z0-9_]*[A-Z0-9]\b`)
	files, err := filepath.Glob(filepath.Join(repo, "hack", "*.sh"))
	if err != nil || len(files) < 10 {
		t.Fatalf("hack/*.sh: %v, %v", files, err)
	}
	e2e, _ := filepath.Glob(filepath.Join(repo, "test", "e2e", "*.go"))
	files = append(append(files, filepath.Join(repo, ".ci", "run")), e2e...)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".go") && regexp.MustCompile(`os\.(Getenv|LookupEnv)\("E2E_`).Match(b) {
			t.Errorf("%s reads an E2E_ variable with os.Getenv: read it through the Suite (e2econfig)", f)
		}
		for _, n := range name.FindAllString(string(b), -1) {
			seen++
			if !slices.Contains(Names(), n) && !slices.Contains(ScriptVariables, n) && !slices.Contains(local, n) {
				t.Errorf("%s names %s, which e2econfig declares neither in Variables nor in ScriptVariables", filepath.Base(f), n)
			}
		}
	}
	if seen < 50 {
		t.Fatalf("found %d E2E_ names in the scripts and tests; is the repository at %s?", seen, repo)
	}
}
