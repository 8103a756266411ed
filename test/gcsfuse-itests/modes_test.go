package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// The mounted mode refuses a directory that is not a FUSE mount (a wrong host path would
// otherwise run the tests against the node's disk) and records it as the suite's failure.
func TestMountedRefusesAPlainDirectory(t *testing.T) {
	r := &runner{work: t.TempDir(), log: io.Discard}
	dir := t.TempDir()
	sr := mounted(context.Background(), r, suites[0], dir, "b")
	if !strings.Contains(sr.Error, "is not a FUSE mount") {
		t.Errorf("error %q", sr.Error)
	}
	if len(sr.Tests) != 1 || sr.Tests[0].Name != packageTest || sr.Tests[0].Action != "fail" {
		t.Errorf("tests %+v, want the package's failure", sr.Tests)
	}
}

// mounted runs one suite at a time: each merges into the results file, a rerun replaces.
func TestReportMergeAndRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	rep := &Report{Mode: "mounted"}
	rep.merge(SuiteReport{Suite: "readonly", Tests: []TestResult{fail("TestA", "x")}})
	rep.merge(SuiteReport{Suite: "operations", Tests: []TestResult{pass("TestB")}})
	rep.merge(SuiteReport{Suite: "readonly", Tests: []TestResult{pass("TestA")}})
	if err := writeReport(path, rep); err != nil {
		t.Fatal(err)
	}
	got, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != "mounted" || len(got.Suites) != 2 || got.Suites[0].Suite != "operations" || got.Suites[1].Tests[0].Action != "pass" {
		t.Errorf("read back %+v (want operations first, as the default set orders them, and readonly's rerun)", got)
	}
}
