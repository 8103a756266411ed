// Package e2econfig is the e2e suite's configuration, typed and checked in one place: every
// variable hack/e2e.sh (or a person) passes to `go test ./test/e2e`, read once by the suite's
// TestMain (FromEnv) rather than by each test with os.Getenv. A misspelt variable
// (E2E_REQUIRED=1, E2E_HELMCHART=...) is refused by name instead of silently turning a check
// off, and `go doc` of Variables lists what a run can set.
package e2econfig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Suite is one run's configuration of the e2e tests.
type Suite struct {
	// Kubeconfig is the cluster's; empty: the tests skip (a laptop's go test ./...).
	Kubeconfig string
	// Require: a missing piece (no cluster, no Prometheus) fails the run instead of skipping.
	Require bool
	// Keep leaves the tests' namespaces behind for a look afterwards.
	Keep bool
	// GCSURL is the emulator's base URL as this host reaches it; empty: the first node's
	// internal IP on the emulator's port.
	GCSURL string
	// ImageRepo and ImageTag name the images installed ($ImageRepo/<name>:$ImageTag).
	ImageRepo, ImageTag string
	// ImageDigests are the release's images pinned by digest (name -> sha256:...), set when
	// the driver was installed from the release artifacts.
	ImageDigests map[string]string
	// Helm and HelmChart: the helm binary and the chart the driver was installed with; both
	// or neither (kustomize).
	Helm, HelmChart string
	// Prometheus and NetNS: a real Prometheus binary and the cluster's network namespace
	// it runs in, for the dashboard's queries.
	Prometheus, NetNS string
	// NodeSystemctl is the node's systemctl stand-in (hack/node-systemctl.sh), which stops
	// and starts its kubelet as the storage suites' disruptive tests do; empty: the tests that
	// restart the kubelet skip (fail with Require).
	NodeSystemctl string
	// Kubectl is the cluster's kubectl, for what a user does with it and the API alone does
	// not (kubectl drain: TestNodeDrain); empty: those tests fail when they run.
	Kubectl string
	// Nodes is how many nodes the cluster was started with (hack/'s NODES; 0: unsaid). The
	// tests that need two nodes (TestEveryNode) run when it is 2 or more, and fail when the
	// cluster has fewer nodes Ready; below 2 they skip, saying so.
	Nodes int
	// PreviousRelease and UpgradeCmd: the release installed before the upgrade test and the
	// command that upgrades it to this tree; both or neither.
	PreviousRelease, UpgradeCmd string
	// ParallelStarted is a file written once the first parallel test starts (hack/e2e.sh
	// starts the storage suites beside them then).
	ParallelStarted string
	// Chaos runs TestChaosSoak for that long (0: it skips): Jobs of every mode on every
	// node while faults strike (hack/chaos.sh; CI's polling run, a short one).
	Chaos time.Duration
	// ChaosFaults are the kinds of fault the soak strikes (E2E_CHAOS_FAULTS, comma-separated,
	// as its table names them; none: every kind).
	ChaosFaults []string
	// ChaosMarkdown is a file for TestChaosSoak's table (docs/performance.md's chaos block).
	ChaosMarkdown string
	// Demo runs TestDemo, DemoRuns times per case (0: its default), and writes its table to
	// DemoMarkdown when set.
	Demo         bool
	DemoRuns     int
	DemoMarkdown string
}

// ChaosKinds are the kinds of fault TestChaosSoak strikes, as its table names them (the
// test checks its own list is this one).
var ChaosKinds = []string{
	"backend-503", "backend-drop", "backend-slow", "containerd-restarted", "controller-deleted", "gcsfuse-killed",
	"kubelet-restarted", "mounter-killed", "node-drained", "node-plugin-killed", "sidecar-killed", "webhook-deleted",
}

// MinChaos and MaxChaos bound the chaos soak: the shortest strikes a handful of faults (a
// round of every kind takes about a minute), the longest ends with its settling and clean-up
// inside hack/chaos.sh's go test timeout (E2E_TIMEOUT=2h).
const (
	MinChaos = 30 * time.Second
	MaxChaos = 90 * time.Minute
)

// variable is one environment variable of the suite: its name, what it is, and how it sets
// the Suite.
type variable struct {
	Name, Doc string
	set       func(*Suite, string) error
}

func str(f func(*Suite) *string) func(*Suite, string) error {
	return func(s *Suite, v string) error { *f(s) = v; return nil }
}

// positive sets an int that must be a positive number when set.
func positive(name string, f func(*Suite) *int) func(*Suite, string) error {
	return func(s *Suite, v string) error {
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s=%q: want a positive number", name, v)
		}
		*f(s) = n
		return nil
	}
}

// flag reads "1" as true and "" as false; anything else is refused, so that E2E_REQUIRE=true
// cannot be read as false.
func flag(name string, f func(*Suite) *bool) func(*Suite, string) error {
	return func(s *Suite, v string) error {
		switch v {
		case "1":
			*f(s) = true
		case "", "0":
			*f(s) = false
		default:
			return fmt.Errorf("%s=%q: want 1 (or 0, or unset)", name, v)
		}
		return nil
	}
}

// Variables are the suite's variables, in the order a reader needs them.
var Variables = []variable{
	{"E2E_KUBECONFIG", "the cluster's kubeconfig; unset: the tests skip", str(func(s *Suite) *string { return &s.Kubeconfig })},
	{"E2E_REQUIRE", "1: what a test needs and lacks fails it rather than skipping it", flag("E2E_REQUIRE", func(s *Suite) *bool { return &s.Require })},
	{"E2E_KEEP", "1: keep the tests' namespaces", flag("E2E_KEEP", func(s *Suite) *bool { return &s.Keep })},
	{"E2E_GCS_URL", "the emulator's base URL from this host", str(func(s *Suite) *string { return &s.GCSURL })},
	{"E2E_IMAGE_REPO", "the images' repository", str(func(s *Suite) *string { return &s.ImageRepo })},
	{"E2E_IMAGE_TAG", "the images' tag", str(func(s *Suite) *string { return &s.ImageTag })},
	{"E2E_IMAGE_DIGESTS", "name=sha256:<64 hex>,...: the release's images by digest", func(s *Suite, v string) error {
		d, err := parseDigests(v)
		s.ImageDigests = d
		return err
	}},
	{"E2E_HELM", "the helm binary the driver was installed with", str(func(s *Suite) *string { return &s.Helm })},
	{"E2E_HELM_CHART", "the chart (directory or .tgz) it was installed from", str(func(s *Suite) *string { return &s.HelmChart })},
	{"E2E_PROMETHEUS", "a Prometheus binary, for the dashboard's queries", str(func(s *Suite) *string { return &s.Prometheus })},
	{"E2E_NETNS", "the cluster's network namespace (/run/netns/...)", str(func(s *Suite) *string { return &s.NetNS })},
	{"E2E_NODE_SYSTEMCTL", "the node's systemctl stand-in (hack/node-systemctl.sh), to stop and start its kubelet and containerd", str(func(s *Suite) *string { return &s.NodeSystemctl })},
	{"E2E_KUBECTL", "the cluster's kubectl (kubectl drain)", str(func(s *Suite) *string { return &s.Kubectl })},
	{"E2E_NODES", "how many nodes the cluster was started with (hack/'s NODES)", positive("E2E_NODES", func(s *Suite) *int { return &s.Nodes })},
	{"E2E_PREVIOUS_RELEASE", "the release installed before TestUpgradeFromPreviousRelease", str(func(s *Suite) *string { return &s.PreviousRelease })},
	{"E2E_UPGRADE_CMD", "the command that upgrades it to this tree", str(func(s *Suite) *string { return &s.UpgradeCmd })},
	{"E2E_PARALLEL_STARTED", "a file written when the first parallel test starts", str(func(s *Suite) *string { return &s.ParallelStarted })},
	{"E2E_CHAOS", "TestChaosSoak's length (a Go duration, 30s to 90m; unset: it skips)", func(s *Suite, v string) error {
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < MinChaos || d > MaxChaos {
			return fmt.Errorf("E2E_CHAOS=%q: want a duration of %s to %s", v, MinChaos, MaxChaos)
		}
		s.Chaos = d
		return nil
	}},
	{"E2E_CHAOS_FAULTS", "the kinds of fault the soak strikes, comma-separated (unset: every kind)", func(s *Suite, v string) error {
		if v == "" {
			return nil
		}
		for _, k := range strings.Split(v, ",") {
			if !slices.Contains(ChaosKinds, k) {
				return fmt.Errorf("E2E_CHAOS_FAULTS=%q: no fault %q; want some of %s, separated by commas", v, k, strings.Join(ChaosKinds, ","))
			}
			s.ChaosFaults = append(s.ChaosFaults, k)
		}
		return nil
	}},
	{"E2E_CHAOS_MARKDOWN", "a file for TestChaosSoak's table", str(func(s *Suite) *string { return &s.ChaosMarkdown })},
	{"E2E_DEMO", "1: run TestDemo", flag("E2E_DEMO", func(s *Suite) *bool { return &s.Demo })},
	{"E2E_DEMO_RUNS", "TestDemo's runs per case (a positive number)", positive("E2E_DEMO_RUNS", func(s *Suite) *int { return &s.DemoRuns })},
	{"E2E_DEMO_MARKDOWN", "a file for TestDemo's table", str(func(s *Suite) *string { return &s.DemoMarkdown })},
}

// ScriptVariables are the E2E_ variables the scripts read themselves (hack/e2e.sh,
// hack/test.sh, hack/conformance.sh, hack/demo-cluster.sh; their headers say what each
// does): in the tests' environment they are inherited, not read, and not refused.
var ScriptVariables = []string{
	"E2E_RUN", "E2E_PARALLEL", "E2E_KEEP_CLUSTER", "E2E_UNINSTALL", "E2E_CONFORMANCE",
	"E2E_GCSFUSE_ITESTS", "E2E_PREBUILD_PREVIOUS", "E2E_FROM_RELEASE", "E2E_LOCK_TAKEN", "E2E_TIMEOUT",
}

// FromEnv reads the suite's configuration from environ (os.Environ()'s form). It refuses an
// E2E_ variable that is neither the suite's nor a script's, a malformed value, and pairs set
// by half.
func FromEnv(environ []string) (Suite, error) {
	var s Suite
	var errs []error
	values := map[string]string{}
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "E2E_") {
			continue
		}
		if !slices.ContainsFunc(Variables, func(x variable) bool { return x.Name == name }) && !slices.Contains(ScriptVariables, name) {
			errs = append(errs, fmt.Errorf("unknown variable %s: the suite reads %s", name, strings.Join(Names(), ", ")))
			continue
		}
		values[name] = v
	}
	for _, x := range Variables {
		if err := x.set(&s, values[x.Name]); err != nil {
			errs = append(errs, err)
		}
	}
	if (s.Helm == "") != (s.HelmChart == "") {
		errs = append(errs, errors.New("set both E2E_HELM and E2E_HELM_CHART, or neither"))
	}
	if s.PreviousRelease != "" && s.UpgradeCmd == "" {
		errs = append(errs, errors.New("E2E_PREVIOUS_RELEASE is set but E2E_UPGRADE_CMD (the command that upgrades to this tree) is not"))
	}
	if s.Chaos != 0 && s.Nodes < 2 {
		errs = append(errs, fmt.Errorf("E2E_CHAOS=%s: the soak needs two nodes (E2E_NODES=2, hack/chaos.sh), not %d", s.Chaos, max(s.Nodes, 1)))
	}
	if len(s.ChaosFaults) > 0 && s.Chaos == 0 {
		errs = append(errs, errors.New("E2E_CHAOS_FAULTS is set but E2E_CHAOS (the soak's length) is not"))
	}
	if s.ChaosMarkdown != "" && s.Chaos == 0 {
		errs = append(errs, errors.New("E2E_CHAOS_MARKDOWN is set but E2E_CHAOS (the soak's length) is not"))
	}
	if s.Require && s.Kubeconfig == "" {
		errs = append(errs, errors.New("E2E_REQUIRE=1 but E2E_KUBECONFIG is not set"))
	}
	return s, errors.Join(errs...)
}

// Names are the suite's variables' names.
func Names() []string {
	names := make([]string, len(Variables))
	for i, x := range Variables {
		names[i] = x.Name
	}
	return names
}

// parseDigests reads name=sha256:<64 hex>, comma-separated; "" is none.
func parseDigests(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		name, d, ok := strings.Cut(kv, "=")
		hex, isSHA := strings.CutPrefix(d, "sha256:")
		if !ok || name == "" || !isSHA || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("E2E_IMAGE_DIGESTS: %q: want name=sha256:<64 hex digits>", kv)
		}
		m[name] = d
	}
	return m, nil
}
