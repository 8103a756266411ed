package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
)

// records is a run in the shape hack/test.sh writes: a modified tree, a cold background
// build, fuzzing with the default workers, two e2e runs of which only the second has a
// phase (previous-release), a phase that failed without failing the run (cluster-down) and
// a suite without subtests.
const records = "start\t1796445654000000000\tabc1234\tmodified\t2\n" +
	"step\t1796445654000000000\tinstall what is missing (hack/install-deps.sh)\n" +
	"step\t1796445654500000000\tgofmt\n" +
	"step\t1796445656000000000\tgo test -race ./...\n" +
	"step\t1796445756000000000\twait for the background build of the cluster's components\n" +
	"cluster-build\t812345\n" +
	"step\t1796446500000000000\te2e: every test\n" +
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
	"e2e\tv1.34.4\t1.6 (Debian)\n" +
	"phase\tdeps\t300\t0\n" +
	"phase\tprevious-release\t2400\t0\n" +
	"phase\timages\t13500\t0\n" +
	"tests\ttest\t1\t0\t0\t6\n" +
	"phase\ttest\t49400\t0\n" +
	"end\t1796447400000000000\n"

const want = "Commit abc1234 with uncommitted changes, 2026-12-05, 2 CPUs: 1746.0 s (29.1 min) from `hack/test.sh`'s start to \"all tests passed\".\n" +
	"\n" +
	"| step of `hack/test.sh` | start, s | took, s |\n" +
	"|---|---|---|\n" +
	"| install what is missing (hack/install-deps.sh) | 0.0 | 0.5 |\n" +
	"| gofmt | 0.5 | 1.5 |\n" +
	"| go test -race ./... | 2.0 | 100.0 |\n" +
	"| wait for the background build of the cluster's components | 102.0 | 744.0 |\n" +
	"| e2e: every test (run 1) | 846.0 | 800.0 |\n" +
	"| e2e: upgrade (run 2) | 1646.0 | 100.0 |\n" +
	"| total | | 1746.0 |\n" +
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
		{"", ""},
	} {
		rep, err := parse(strings.NewReader("start\t1\tc\tclean\t2\n" + c.records + "end\t2\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.background(); got != c.want {
			t.Errorf("%q: background %q, want %q", c.records, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	const start, end = "start\t100\tc\tclean\t2\n", "end\t200\n"
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
		{start + "step\t150\ta\nstep\t140\tb\n" + end, `line 3: step "b" begins before the one above it`},
		{start + "step\t50\ta\n" + end, `line 2: step "a" begins before the one above it`},
		{start + "step\t250\ta\n" + end, "line 3: the end record is before the last step"},
		{start + end + "step\t250\ta\n", "line 3: step record after the end record"},
		{start + start + end, "line 2: a second start record"},
		{"start\t100\tc\tdirty\t2\n" + end, `work tree "dirty"`},
	} {
		_, err := parse(strings.NewReader(c.records))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.records, err, c.want)
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
	if err != nil || len(blocks) != 1 || blocks[0].Name != "ci-timing" || blocks[0].By != "CI_MARKDOWN=FILE .ci/run" {
		t.Fatalf("the file holds %+v (%v), want the one block ci-timing by CI_MARKDOWN=FILE .ci/run", blocks, err)
	}
	if blocks[0].Body != "\n"+want+"\n" {
		t.Errorf("block body:\n%s\nwant:\n%s", blocks[0].Body, want)
	}
	readme := "# T\n\n<!-- BEGIN GENERATED: ci-timing (by CI_MARKDOWN=FILE .ci/run) -->\nold\n<!-- END GENERATED: ci-timing -->\n\nafter\n"
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
	if err := os.WriteFile(in, []byte("start\t1\tc\tclean\t2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"-records", in, "-by", "x", "-markdown", out}, &stderr); code != 1 || !strings.Contains(stderr.String(), "no end record") {
		t.Errorf("unfinished run: exit %d, %q; want 1 naming the missing end", code, stderr.String())
	}
}
