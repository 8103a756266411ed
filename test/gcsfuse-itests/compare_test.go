package main

import (
	"bytes"
	"strings"
	"testing"
)

func report(mode string, suites ...SuiteReport) *Report { return &Report{Mode: mode, Suites: suites} }

func suite(name string, tests ...TestResult) SuiteReport {
	return SuiteReport{Suite: name, Package: name, Tests: tests}
}

func pass(name string) TestResult { return TestResult{Name: name, Action: "pass"} }
func fail(name, why string) TestResult {
	return TestResult{Name: name, Action: "fail", Reason: why}
}
func skip(name, why string) TestResult { return TestResult{Name: name, Action: "skip", Reason: why} }

func TestClassify(t *testing.T) {
	standalone := report("standalone",
		suite("ops",
			pass("TestBoth"),
			fail("TestGap", "rename: input/output error"),
			pass("TestBug"),
			fail("TestFlaky", "timeout"),
			skip("TestSkipped", "needs HNS"),
			pass("TestSkippedMounted"),
			pass("TestMissing"),
			fail("TestGapMissing", "emulator"),
		),
		suite("other", pass("TestA")),
	)
	mounted := report("mounted",
		suite("ops",
			pass("TestBoth"),
			fail("TestGap", "rename: input/output error"),
			fail("TestBug", "permission denied"),
			pass("TestFlaky"),
			skip("TestSkipped", "needs HNS"),
			skip("TestSkippedMounted", "not here"),
			pass("TestNew"),
		),
	)
	got := map[string]Verdict{}
	for _, v := range classify(standalone, mounted) {
		got[v.Suite+" "+v.Test] = v
	}
	want := map[string]struct {
		class  Class
		reason string
	}{
		"ops TestBoth":           {Pass, ""},
		"ops TestGap":            {EmulatorGap, "rename: input/output error"},
		"ops TestBug":            {DriverBug, "permission denied"},
		"ops TestFlaky":          {MountedOnly, "timeout"},
		"ops TestSkipped":        {Skipped, "needs HNS"},
		"ops TestSkippedMounted": {Skipped, "mounted: not here"},
		"ops TestMissing":        {DriverBug, "passed standalone; no result mounted"},
		"ops TestGapMissing":     {EmulatorGap, "emulator"},
		"ops TestNew":            {NewMounted, ""},
		"other TestA":            {NotRun, ""},
	}
	if len(got) != len(want) {
		t.Errorf("%d verdicts, want %d: %+v", len(got), len(want), got)
	}
	for k, w := range want {
		v, ok := got[k]
		if !ok {
			t.Errorf("%s: no verdict", k)
			continue
		}
		if v.Class != w.class || !strings.HasPrefix(v.Reason, w.reason) {
			t.Errorf("%s: %q (%q), want %q (%q...)", k, v.Class, v.Reason, w.class, w.reason)
		}
	}
}

// A parent's outcome follows from its subtests': only the subtests are judged, unless the
// parent failed on its own (its setup), which then is.
func TestClassifyJudgesLeaves(t *testing.T) {
	standalone := report("standalone",
		suite("s", fail("TestSuite", ""), pass("TestSuite/A"), fail("TestSuite/B", "gap"), pass("TestSetup")),
	)
	mounted := report("mounted",
		suite("s", fail("TestSuite", ""), pass("TestSuite/A"), fail("TestSuite/B", "gap"), fail("TestSetup", "SetupSuite: mount")),
	)
	var got []string
	for _, v := range classify(standalone, mounted) {
		got = append(got, v.Test+"="+string(v.Class))
	}
	want := "TestSuite/A=pass TestSuite/B=emulator gap TestSetup=driver bug"
	if strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, " "), want)
	}
}

// A binary that died before its tests (TestMain) fails the package's pseudo-test: against a
// standalone run that passed, every test of the suite is missing, hence driver bugs.
func TestClassifyPackageFailure(t *testing.T) {
	standalone := report("standalone", suite("s", pass("TestA"), pass("TestB")))
	mounted := report("mounted", suite("s", fail(packageTest, "No configuration found")))
	n := 0
	for _, v := range classify(standalone, mounted) {
		if v.Class == DriverBug {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d driver bugs, want 2 (both tests missing)", n)
	}
}

func TestPrintVerdictsCountsDriverBugs(t *testing.T) {
	var b bytes.Buffer
	n := printVerdicts(&b, []Verdict{
		{Suite: "s", Test: "A", Class: Pass},
		{Suite: "s", Test: "B", Class: DriverBug, Reason: "EACCES"},
		{Suite: "s", Test: "C", Class: EmulatorGap, Reason: "no moveTo"},
	})
	if n != 1 {
		t.Errorf("printVerdicts returned %d driver bugs, want 1", n)
	}
	for _, want := range []string{"pass:", "driver bug: s B: EACCES", "emulator gap: s C: no moveTo"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
