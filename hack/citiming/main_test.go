package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/procs"
)

// records is a run in the shape hack/test.sh writes: a modified tree, a cold background
// build, fuzzing with the default workers, two e2e runs of which only the second has a
// phase (previous-release), a phase that failed without failing the run (cluster-down) and
// a suite without subtests.
const records = "start\t1796445654000000000\tabc1234\tmodified\t2\tcold\n" +
	"step\t1796445654000000000\tinstall what is missing (hack/install-deps.sh)\n" +
	"cpu\t1796445654000000000\t5000000\n" +
	"step\t1796445654500000000\tgofmt\n" +
	"cpu\t1796445654500000000\t5001000\n" +
	"step\t1796445656000000000\tgo test -race ./...\n" +
	"cpu\t1796445656000000000\t5001300\n" +
	"step\t1796445756000000000\twait for the background build of the cluster's components\n" +
	"cpu\t1796445756000000000\t5151300\n" +
	"cluster-build\t812345\n" +
	"step\t1796446500000000000\te2e: every test\n" +
	"cpu\t1796446500000000000\t6639300\n" +
	"e2e\tv1.34.4\tv2.4.2\n" +
	"phase\tdeps\t300\t0\n" +
	"phase\timages\t9800\t0\n" +
	"tests\ttest\t44\t1\t2\t95\n" +
	"phase\ttest\t685300\t0\n" +
	"phase\tconformance\t43400\t0\n" +
	"tests\tconformance\t4\t0\t311\t-\n" +
	"phase\tcluster-down\t13800\t1\n" +
	"fuzz\t8\t10s\t117100\t\n" +
	"step\t1796447300000000000\te2e: upgrade\n" +
	"cpu\t1796447300000000000\t7439300\n" +
	"e2e\tv1.34.4\t1.6 (Debian)\n" +
	"phase\tdeps\t300\t0\n" +
	"phase\tprevious-release\t2400\t0\n" +
	"phase\timages\t13500\t0\n" +
	"tests\ttest\t1\t0\t0\t6\n" +
	"phase\ttest\t49400\t0\n" +
	"cpu\t1796447400000000000\t7489300\n" +
	"end\t1796447400000000000\n"

const want = "Commit abc1234 with uncommitted changes, 2026-12-05, 2 CPUs, cold (empty Go caches, no `$GCSFUSE_CSI_CACHE`: a fresh machine): 1746.0 s (29.1 min) from `hack/test.sh`'s start to \"all tests passed\".\n" +
	"\n" +
	"| step of `hack/test.sh` | start, s | took, s | cores busy |\n" +
	"|---|---|---|---|\n" +
	"| install what is missing (hack/install-deps.sh) | 0.0 | 0.5 | 2.00 of 2 |\n" +
	"| gofmt | 0.5 | 1.5 | 0.20 of 2 |\n" +
	"| go test -race ./... | 2.0 | 100.0 | 1.50 of 2 |\n" +
	"| wait for the background build of the cluster's components | 102.0 | 744.0 | 2.00 of 2 |\n" +
	"| e2e: every test (run 1) | 846.0 | 800.0 | 1.00 of 2 |\n" +
	"| e2e: upgrade (run 2) | 1646.0 | 100.0 | 0.50 of 2 |\n" +
	"| total | | 1746.0 | 1.43 of 2 |\n" +
	"\n" +
	"In the background: the cluster's components (`hack/cluster-deps.sh`, `hack/k8s-build.sh`) 812.3 s, built, not all cached; the fuzz stage (`hack/fuzz.sh`: 8 targets, 10s each, one worker per CPU) 117.1 s.\n" +
	"\n" +
	"| e2e phase, s | run 1 | run 2 |\n" +
	"|---|---|---|\n" +
	"| Kubernetes, containerd | v1.34.4, v2.4.2 | v1.34.4, 1.6 (Debian) |\n" +
	"| deps | 0.3 | 0.3 |\n" +
	"| previous-release | | 2.4 |\n" +
	"| images | 9.8 | 13.5 |\n" +
	"| test | 685.3 | 49.4 |\n" +
	"| test: tests | 44 of 47 passed, 1 failed, 2 skipped (95 subtests passed) | 1 of 1 passed (6 subtests passed) |\n" +
	"| conformance | 43.4 | |\n" +
	"| conformance: tests | 4 of 315 passed, 311 skipped | |\n" +
	"| cluster-down | 13.8 (rc=1) | |\n" +
	"| all phases | 752.6 | 65.6 |\n"

func TestMarkdown(t *testing.T) {
	rep, err := parse(strings.NewReader(records))
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.markdown(); got != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestBackground(t *testing.T) {
	for _, c := range []struct{ records, want string }{
		{"cluster-build\t412\n", "the cluster's components (`hack/cluster-deps.sh`, `hack/k8s-build.sh`) 0.4 s, everything cached"},
		{"fuzz\t8\t10s\t117100\t1\n", "the fuzz stage (`hack/fuzz.sh`: 8 targets, 10s each, one worker) 117.1 s"},
		{"fuzz\t2\t30s\t61000\t3\n", "the fuzz stage (`hack/fuzz.sh`: 2 targets, 30s each, 3 workers) 61.0 s"},
		{"background\tlint\t95000\nbackground\trelease-images\t310500\n", "`hack/lint.sh` (go vet, staticcheck, deadcode) 95.0 s; `TestReleasePush` (release images for amd64 and arm64, pushed and pulled back) 310.5 s"},
		{"", ""},
	} {
		rep, err := parse(strings.NewReader("start\t1\tc\tclean\t2\twarm\n" + c.records + "end\t2\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.background(); got != c.want {
			t.Errorf("%q: background %q, want %q", c.records, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	const start, end = "start\t100\tc\tclean\t2\twarm\n", "end\t200\n"
	for _, c := range []struct{ records, want string }{
		{"", "no start record"},
		{start, "no end record"},
		{"step\t100\tgofmt\n" + start + end, "line 1: step record before the start record"},
		{start + "bogus\t1\n" + end, `line 2: unknown record "bogus"`},
		{start + "step\t150\n" + end, "line 2: step record with 2 fields, want 3"},
		{start + "step\t15o\tgofmt\n" + end, `line 2: step record: "15o" is not a count`},
		{start + "phase\tdeps\t300\t0\n" + end, "line 2: phase record outside an e2e run"},
		{start + "tests\ttest\t1\t0\t0\t-\n" + end, "line 2: tests record outside an e2e run"},
		{start + "cluster-build\t-5\n" + end, "negative"},
		{start + "background\tvet\t5\n" + end, `line 2: background record: unknown check "vet"`},
		{start + "step\t150\ta\nstep\t140\tb\n" + end, `line 3: step "b" begins before the one above it`},
		{start + "step\t50\ta\n" + end, `line 2: step "a" begins before the one above it`},
		{start + "step\t250\ta\n" + end, "line 3: the end record is before the last step"},
		{start + end + "step\t250\ta\n", "line 3: step record after the end record"},
		{start + start + end, "line 2: a second start record"},
		{start + "cpu\t150\n" + end, "line 2: cpu record with 2 fields, want 3"},
		{"start\t100\tc\tdirty\t2\twarm\n" + end, `work tree "dirty"`},
		{"start\t100\tc\tclean\t2\ttepid\n" + end, `caches "tepid"`},
	} {
		_, err := parse(strings.NewReader(c.records))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.records, err, c.want)
		}
	}
}

// TestCoresBusyBadSamples: a cpu sample that cannot be read (an empty figure when getconf or
// awk failed) or that goes backwards costs the column its figures, never the block.
func TestCoresBusyBadSamples(t *testing.T) {
	const head = "start\t100\tc\tclean\t2\twarm\ncpu\t100\t0\nstep\t1000000000\ta\ncpu\t1000000000\t500\n"
	for _, bad := range []string{"cpu\t5000000000\t\n", "cpu\t5000000000\t40o\n", "cpu\t5000000000\t400\n", "cpu\t900000000\t4000\n"} {
		rep, err := parse(strings.NewReader(head + bad + "end\t5000000000\n"))
		if err != nil {
			t.Errorf("%q: %v, want the block without cores-busy figures", bad, err)
			continue
		}
		if got := rep.coresBusy(1e9, 5e9) + rep.coresBusy(100, 1e9); got != "" {
			t.Errorf("%q: cores busy %q, want none", bad, got)
		}
	}
}

// TestCoresBusyNeedsSamplesOfTheStep: a step whose start or end has no cpu sample of its own
// moment gets no figure (not the next sample's, which would charge it another step's CPU).
func TestCoresBusyNeedsSamplesOfTheStep(t *testing.T) {
	rep, err := parse(strings.NewReader("start\t100\tc\tclean\t2\twarm\n" +
		"step\t1000000000\ta\ncpu\t1000000000\t0\n" +
		"step\t3000000000\tb\n" +
		"step\t4000000000\tc\ncpu\t4000000000\t3000\n" +
		"cpu\t5000000000\t4000\nend\t5000000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to int64
		want     string
	}{
		{1e9, 3e9, ""},          // b has no sample
		{3e9, 4e9, ""},          // nor here
		{1e9, 4e9, "1.00 of 2"}, // 3 s busy over 3 s
		{4e9, 5e9, "1.00 of 2"}, // 1 s over 1 s
		{1e9, 5e9, "1.00 of 2"}, // the total
		{4e9, 4e9, ""},          // no time
	} {
		if got := rep.coresBusy(c.from, c.to); got != c.want {
			t.Errorf("coresBusy(%d, %d) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

// TestRun writes the block as hack/test.sh has it written, and splices it into a README
// the way hack/readme does.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "ci-records.tsv"), filepath.Join(dir, "ci.md")
	if err := os.WriteFile(in, []byte(records), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if code := run([]string{"-records", in, "-by", "CI_MARKDOWN=FILE .ci/run", "-markdown", out}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmegen.Parse(string(b))
	if err != nil || len(blocks) != 1 || blocks[0].Name != "ci-timing-cold" || blocks[0].By != "CI_MARKDOWN=FILE .ci/run" {
		t.Fatalf("the file holds %+v (%v), want the one block ci-timing-cold by CI_MARKDOWN=FILE .ci/run", blocks, err)
	}
	if blocks[0].Body != "\n"+want+"\n" {
		t.Errorf("block body:\n%s\nwant:\n%s", blocks[0].Body, want)
	}
	readme := "# T\n\n<!-- BEGIN GENERATED: ci-timing-cold (by CI_MARKDOWN=FILE .ci/run) -->\nold\n<!-- END GENERATED: ci-timing-cold -->\n\nafter\n"
	got, err := readmegen.Splice(readme, blocks...)
	if err != nil {
		t.Fatal(err)
	}
	if wantDoc := "# T\n\n" + string(b) + "\nafter\n"; got != wantDoc {
		t.Errorf("spliced:\n%s\nwant:\n%s", got, wantDoc)
	}

	for _, args := range [][]string{
		{"-records", in, "-markdown", out},
		{"-records", in, "-by", "x", "-markdown", out, "extra"},
	} {
		if code := run(args, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if err := os.WriteFile(in, []byte("start\t1\tc\tclean\t2\twarm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"-records", in, "-by", "x", "-markdown", out}, &stderr); code != 1 || !strings.Contains(stderr.String(), "no end record") {
		t.Errorf("unfinished run: exit %d, %q; want 1 naming the missing end", code, stderr.String())
	}
}

// shellFunc is the definition of function name in the script file: from "name() {" to the
// first line that is "}".
func shellFunc(t *testing.T, file, name string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?ms)^` + regexp.QuoteMeta(name) + `\(\) \{.*?^\}$`).Find(b)
	if m == nil {
		t.Fatalf("%s: no function %s", file, name)
	}
	return string(m)
}

// TestScriptsRecords runs what the scripts record with, for real but without a cluster or a
// test run: hack/lib.sh's ci_record functions, hack/test.sh's stage and hack/e2e.sh's phase
// (taken from the scripts), fed a fake `go test -v` log and storage suite table; then formats
// the records. The scripts' record lines and this program's parser must agree.
func TestScriptsRecords(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	testLog := filepath.Join(dir, "e2e-test.log")
	if err := os.WriteFile(testLog, []byte(strings.Join([]string{
		"=== RUN   TestA", "--- PASS: TestA (1.00s)", "    --- PASS: TestA/native (0.50s)",
		"    --- PASS: TestA/legacy (0.50s)", "        --- PASS: TestA/legacy/deep (0.10s)",
		"--- SKIP: TestB (0.00s)", "--- PASS: TestC (2.00s)", "    --- SKIP: TestC/old (0.00s)",
		"PASS", "ok  \tgithub.com/gcsfuse-csi/gcsfuse-csi/test/e2e\t3.0s", ""}, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(dir, "table.md")
	if err := os.WriteFile(table, []byte("| passed (8.2 s) | x | |\n\npassed 4, failed 0 (+0 known, listed with their upstream reason), skipped 311, of 315 tests of the driver\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs := filepath.Join(dir, "ci-records.tsv")
	script := `set -euo pipefail
source hack/lib.sh
` + shellFunc(t, "../test.sh", "stage") + `
` + shellFunc(t, "../test.sh", "cache_state") + `
` + shellFunc(t, "../e2e.sh", "phase") + `
phases=()
ci_record_start abc1234 clean 2 "$(cache_state)"
stage gofmt
stage "e2e: every test" "the e2e run, in long"
ci_record e2e v1.34.4 v2.4.2
phase deps true
phase test ci_record_tests test "$TEST_LOG"
phase conformance ci_record_suite conformance "$TABLE"
phase cluster-down false || true
ci_record_suite none /nonexistent
ci_record fuzz 8 10s 1234 ""
ci_record background lint 2345
ci_record_at end
unset CI_RECORDS
ci_record start 1 ignored clean 2 warm
mkdir -p "$GOMODCACHE/cache" && echo "after a module download: $(cache_state)"
rmdir "$GOMODCACHE/cache" && mkdir -p "$XDG_CACHE_HOME/staticcheck/00" && echo "after staticcheck: $(cache_state)"
rmdir "$XDG_CACHE_HOME/staticcheck/00" && mkdir -p "$GOCACHE" && head -c 2000000 /dev/zero >"$GOCACHE/x"
echo "a small Go build cache: $(cache_state)"
echo "a Go build cache over the line: $(COLD_GOCACHE_MIB=1 cache_state)"
`
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CI_RECORDS="+recs, "TEST_LOG="+testLog, "TABLE="+table,
		"GCSFUSE_CSI_CACHE="+filepath.Join(dir, "cache"), "GOMODCACHE="+filepath.Join(dir, "mod"), "GOCACHE="+filepath.Join(dir, "build"),
		"XDG_CACHE_HOME="+filepath.Join(dir, "xdg"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	for _, want := range []string{"after a module download: warm", "after staticcheck: warm",
		"a small Go build cache: cold", "a Go build cache over the line: warm"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cache_state: want %q in\n%s", want, out)
		}
	}
	b, err := os.ReadFile(recs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := parse(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("the scripts' records:\n%s\n%v", b, err)
	}
	if len(rep.steps) != 2 || rep.steps[0].label != "gofmt" || rep.steps[1].label != "e2e: every test" || len(rep.steps[1].runs) != 1 {
		t.Errorf("steps %+v, want gofmt then the e2e step holding run 1", rep.steps)
	}
	// Every step, and the run from its start record, has its cores-busy figure: the samples
	// the scripts take are of exactly the moments the steps and the end are stamped with.
	cores := regexp.MustCompile(`^[0-9]+\.[0-9]{2} of 2$`)
	for i, s := range rep.steps {
		to := rep.end
		if i+1 < len(rep.steps) {
			to = rep.steps[i+1].at
		}
		if got := rep.coresBusy(s.at, to); !cores.MatchString(got) {
			t.Errorf("step %q: cores busy %q, want N.NN of 2 (records:\n%s)", s.label, got, b)
		}
	}
	if got := rep.coresBusy(rep.start, rep.end); !cores.MatchString(got) {
		t.Errorf("the whole run: cores busy %q, want N.NN of 2 (records:\n%s)", got, b)
	}
	if rep.commit != "abc1234" || rep.modified || rep.cpus != 2 || !rep.cold || rep.fuzz == nil || rep.fuzz.targets != 8 || rep.fuzz.workers != "" ||
		len(rep.others) != 1 || rep.others[0].name != "lint" {
		t.Errorf("report %+v, fuzz %+v", rep, rep.fuzz)
	}
	if len(rep.e2e) != 1 {
		t.Fatalf("%d e2e runs, want 1:\n%s", len(rep.e2e), b)
	}
	r := rep.e2e[0]
	var names []string
	for _, p := range r.phases {
		names = append(names, p.name)
		if (p.rc != 0) != (p.name == "cluster-down") {
			t.Errorf("phase %s rc=%d", p.name, p.rc)
		}
	}
	if strings.Join(names, " ") != "deps test conformance cluster-down" {
		t.Errorf("phases %q", names)
	}
	if got, want := r.tests["test"], (counts{passed: 2, skipped: 1, subPassed: 3}); got != want {
		t.Errorf("e2e test counts %+v, want %+v", got, want)
	}
	if got, want := r.tests["conformance"], (counts{passed: 4, skipped: 311, subPassed: -1}); got != want {
		t.Errorf("storage suite counts %+v, want %+v", got, want)
	}
	if len(r.tests) != 2 {
		t.Errorf("counts of %d phases, want 2 (none from a missing table): %+v", len(r.tests), r.tests)
	}
	if md := rep.markdown(); !strings.Contains(md, "| test: tests | 2 of 3 passed, 1 skipped (3 subtests passed) |") {
		t.Errorf("markdown without the test counts:\n%s", md)
	}
}

// TestBudget runs hack/lib.sh's budget_check and budget_run, with which hack/test.sh fails a
// run on course to pass CI's time limit before the limit ends it: a step still running at the
// budget is stopped and named, a stage whose least remaining time no longer fits fails at
// once, and without CI_BUDGET_SECONDS (hack/test.sh by hand) neither does anything.
func TestBudget(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	run := func(budget, script string) (string, int, time.Duration) {
		t.Helper()
		cmd := exec.Command(bash, "-c", "set -euo pipefail\nsource hack/lib.sh\n"+script)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CI_BUDGET_SECONDS="+budget, "GCSFUSE_CSI_CACHE="+filepath.Join(dir, "cache"))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code, time.Since(start)
	}

	out, code, took := run("2", `budget_run "the slow step" sleep 60; echo unreachable`)
	if code != 124 || !strings.Contains(out, `"the slow step" was still running at 0 min`) || strings.Contains(out, "unreachable") || took > 30*time.Second {
		t.Errorf("a step past the budget: exit %d after %s, output %q; want 124 within seconds, naming the step", code, took, out)
	}
	out, code, _ = run("4800", `budget_run "a failing step" bash -c "exit 3" || echo "rc=$?"`)
	if code != 0 || !strings.Contains(out, "rc=3") || strings.Contains(out, "CI budget") {
		t.Errorf("a step that fails within the budget: exit %d, output %q; want its own exit code 3 and no budget line", code, out)
	}
	out, code, _ = run("4800", `budget_check "the e2e runs" 4900; echo unreachable`)
	if code != 1 || !strings.Contains(out, `before "the e2e runs", which with what follows takes at least 4900 s warm: on course to pass 80 min`) || strings.Contains(out, "unreachable") {
		t.Errorf("a stage that cannot fit: exit %d, output %q; want 1 naming the stage and the budget", code, out)
	}
	out, code, _ = run("4800", `budget_check "the e2e runs" 1250 && budget_run "a quick step" true && echo fits`)
	if code != 0 || !strings.Contains(out, "fits") {
		t.Errorf("a run within its budget: exit %d, output %q", code, out)
	}
	// A TERM to the script (a cancelled CI job, Ctrl-C on .ci/run) reaches the step, which
	// runs in timeout's process group: the script ends at once and leaves nothing running.
	cmd := exec.Command(bash, "-c", "set -euo pipefail\nsource hack/lib.sh\nbudget_run \"the step\" sleep 61; echo unreachable")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CI_BUDGET_SECONDS=4800", "GCSFUSE_CSI_CACHE="+filepath.Join(dir, "cache"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if took := time.Since(start); err == nil || took > 15*time.Second {
		t.Errorf("TERM to a script in budget_run: ended after %s with %v; want a failure within seconds", took, err)
	}
	step := func(args []string) bool {
		return len(args) == 2 && filepath.Base(args[0]) == "sleep" && args[1] == "61"
	}
	if left := procs.PIDs(step); len(left) > 0 {
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("the step (sleep 61, pids %v) still runs after its script got TERM", left)
	}

	// The caller's own traps are back after the step.
	out, code, _ = run("4800", `trap 'echo mine' INT; budget_run "a step" true; trap -p INT`)
	if code != 0 || !strings.Contains(out, "echo mine") {
		t.Errorf("the caller's INT trap after budget_run: exit %d, output %q; want it back", code, out)
	}

	out, code, _ = run("", `budget_check "anything" 999999 && budget_run "by hand" bash -c "echo same group: \$(( \$(cut -d' ' -f5 /proc/\$\$/stat) == \$(cut -d' ' -f5 /proc/$$/stat) ))"`)
	if code != 0 || !strings.Contains(out, "same group: 1") {
		t.Errorf("without CI_BUDGET_SECONDS: exit %d, output %q; want no check and the step in the caller's process group", code, out)
	}
}

// TestBackgroundJobs runs hack/lib.sh's background_start and background_wait_var, with which
// hack/test.sh and hack/e2e.sh run builds and checks beside the tests: the job's own exit code
// decides, whether it failed, was stopped, or ended so long before the wait that bash forgot
// its pid (a CI run of ca4bdae failed with 127, "not a child of this shell", with every test
// and the job green; here a pid that is no child of the shell stands for the forgotten one).
func TestBackgroundJobs(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	run := func(script string) string {
		t.Helper()
		cmd := exec.Command(bash, "-c", "set -euo pipefail\nsource hack/lib.sh\nD="+dir+"\n"+script)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GCSFUSE_CSI_CACHE="+filepath.Join(dir, "cache"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return string(out)
	}

	out := run(`background_start j "$D/a.log" 'echo "=== nice $(nice) own session $(( $(cut -d" " -f6 /proc/$$/stat) != '$$' ))"; exit 3'
background_wait_var j "$D/a.log" "the failing job" || echo "rc=$? pid='$j'"`)
	for _, want := range []string{"=== nice 19 own session 1", "the failing job failed (rc=3;", "rc=3 pid=''"} {
		if !strings.Contains(out, want) {
			t.Errorf("a job that fails: output %q; want %q", out, want)
		}
	}

	out = run(`background_start j "$D/b.log" 'sleep 60'
sleep 0.5
background_stop "$j"
background_wait_var j "$D/b.log" "the stopped job" || echo "rc=$?"`)
	if !strings.Contains(out, "rc=143") {
		t.Errorf("a job stopped: output %q; want rc=143 (TERM)", out)
	}

	out = run(`background_start j "$D/c.log" 'echo "=== done"'
background_start k "$D/d.log" 'exit 5'
while [ ! -s "$D/c.log.rc" ] || [ ! -s "$D/d.log.rc" ]; do sleep 0.1; done
background_wait 1 "$D/c.log" "the forgotten job" && echo "ok rc=$?"
background_wait 1 "$D/d.log" "the forgotten failing job" || echo "failed rc=$?"
wait`)
	for _, want := range []string{"=== done", "ok rc=0", "the forgotten failing job failed (rc=5;", "failed rc=5"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs whose pid bash forgot: output %q; want %q", out, want)
		}
	}
}
