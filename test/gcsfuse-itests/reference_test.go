package main

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// Only the suites whose tests passed in the reference and not through a pod, or that the
// reference does not know, are run standalone again; a gap the reference has too, a pass,
// a skip and a pass only mounted are not.
func TestSuspects(t *testing.T) {
	ref := report("standalone",
		suite("ok", pass("TestA"), fail("TestGap", "emulator"), skip("TestS", "HNS")),
		suite("bug", pass("TestA"), pass("TestB")),
		suite("missing", pass("TestA")),
		suite("flaky", fail("TestF", "timeout")),
	)
	mounted := report("mounted",
		suite("ok", pass("TestA"), fail("TestGap", "emulator"), skip("TestS", "HNS")),
		suite("new", pass("TestN")),
		suite("bug", pass("TestA"), fail("TestB", "permission denied")),
		suite("missing"),
		suite("flaky", pass("TestF")),
	)
	if got, want := suspects(ref, mounted), []string{"bug", "missing", "new"}; !slices.Equal(got, want) {
		t.Fatalf("suspects %v, want %v", got, want)
	}
	if got := suspects(ref, report("mounted", ref.Suites...)); len(got) != 0 {
		t.Fatalf("a mounted run equal to the reference has suspects %v", got)
	}
	if got := notRun(ref, report("mounted", mounted.Suites[:2]...)); !slices.Equal(got, []string{"bug", "missing", "flaky"}) {
		t.Fatalf("not run %v, want the reference's suites the mounted run lacks", got)
	}
	// A suite the cluster run leaves out on purpose (CLUSTER_EXCLUDE) is not a missing one.
	if got := notRun(ref, report("mounted", mounted.Suites[:2]...), "missing"); !slices.Equal(got, []string{"bug", "flaky"}) {
		t.Fatalf("not run %v with missing left out, want bug and flaky", got)
	}
	// A fresh standalone run of the suspects judges those suites alone.
	fresh := report("standalone", suite("bug", pass("TestA"), pass("TestB")))
	only := onlySuitesOf(fresh, mounted)
	if len(only.Suites) != 1 || only.Suites[0].Suite != "bug" {
		t.Fatalf("the suspects' comparison judges %v, want bug alone", only.Suites)
	}
}

// The reference keeps outcomes and reasons, not where or how long a test ran, and refuses
// a run that lacks a default suite or whose suite did not run.
func TestReferenceTrimmedAndWhole(t *testing.T) {
	var full Report
	full.Mode = "standalone"
	for _, s := range defaultSuites() {
		full.Suites = append(full.Suites, SuiteReport{Suite: s.Name, Package: s.Package, Dir: "/tmp/x", Bucket: "b", Seconds: 3,
			Tests: []TestResult{{Name: "TestA", Action: "fail", Seconds: 1, Reason: "why"}}})
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	if err := writeReport(in, &full); err != nil {
		t.Fatal(err)
	}
	if rc := referenceCmd("reference", []string{in, out}); rc != 0 {
		t.Fatalf("reference of a whole run: exit %d", rc)
	}
	got, err := readReport(out)
	if err != nil {
		t.Fatal(err)
	}
	s := got.Suites[0]
	if s.Dir != "" || s.Bucket != "" || s.Seconds != 0 || s.Tests[0].Seconds != 0 || s.Tests[0].Reason != "why" || s.Tests[0].Action != "fail" {
		t.Fatalf("reference suite %+v: want no directory, bucket or seconds, the outcome and reason kept", s)
	}
	full.Suites[1].Error = "no mount"
	if err := writeReport(in, &full); err != nil {
		t.Fatal(err)
	}
	if rc := referenceCmd("reference", []string{in, out}); rc == 0 {
		t.Fatal("a run with a suite that did not run made a reference")
	}
	full.Suites = full.Suites[1:]
	if err := writeReport(in, &full); err != nil {
		t.Fatal(err)
	}
	if rc := referenceCmd("reference", []string{in, out}); rc == 0 {
		t.Fatal("a run without every default suite made a reference")
	}
}

// The pinned gcsfuse has its reference, and it judges every default suite: a version bump,
// or a suite added, without `hack/gcsfuse-itests.sh reference` fails here, not in CI's
// cluster run (which would run every suite standalone instead, the slow way).
func TestReferenceOfThePinnedGcsfuse(t *testing.T) {
	path := referenceFile("testdata", mountopts.GCSFuseVersion)
	ref, err := readReport(path)
	if err != nil {
		t.Fatalf("%v: write it with hack/gcsfuse-itests.sh reference", err)
	}
	if ref.Mode != "standalone" {
		t.Fatalf("%s is a %s run", path, ref.Mode)
	}
	if missing := missingSuites(ref); len(missing) > 0 {
		t.Fatalf("%s lacks default suites %v: refresh it with hack/gcsfuse-itests.sh reference", path, missing)
	}
	others, _ := filepath.Glob(filepath.Join("testdata", "reference-v*.json"))
	for _, o := range others {
		if o != path {
			t.Errorf("%s: a reference of another gcsfuse than the pinned %s; remove it", o, mountopts.GCSFuseVersion)
		}
	}
}

// Runs made side by side merge into one file, and runs of two modes never do.
func TestMerge(t *testing.T) {
	dir := t.TempDir()
	out, a, b, other := filepath.Join(dir, "out.json"), filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json"), filepath.Join(dir, "o.json")
	for path, r := range map[string]*Report{
		a:     report("mounted", suite("operations", pass("TestA"))),
		b:     report("mounted", suite("list_large_dir", pass("TestL"))),
		other: report("standalone", suite("readonly", pass("TestR"))),
	} {
		if err := writeReport(path, r); err != nil {
			t.Fatal(err)
		}
	}
	if rc := mergeCmd([]string{out, a}); rc != 0 {
		t.Fatalf("merge into a new file: exit %d", rc)
	}
	if rc := mergeCmd([]string{out, b}); rc != 0 {
		t.Fatalf("merge: exit %d", rc)
	}
	got, err := readReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != "mounted" || len(got.Suites) != 2 {
		t.Fatalf("merged %s run with %d suites, want a mounted one with 2", got.Mode, len(got.Suites))
	}
	if rc := mergeCmd([]string{out, other}); rc == 0 {
		t.Fatal("a standalone run merged into a mounted one")
	}
}
