package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// events renders test2json events, one JSON object a line.
func events(t *testing.T, evs ...event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func out(test, line string) event { return event{Action: "output", Test: test, Output: line + "\n"} }

func TestParseTest2JSON(t *testing.T) {
	in := events(t,
		event{Action: "run", Test: "TestOps"},
		event{Action: "run", Test: "TestOps/TestRename"},
		out("TestOps/TestRename", "=== RUN   TestOps/TestRename"),
		// testify's report, the error lines marked by test2json (^O ... ^N).
		out("TestOps/TestRename", "\x0f    rename_file_test.go:78: \x0e"),
		out("TestOps/TestRename", "\x0f        \tError Trace:\t/root/go/pkg/mod/github.com/googlecloudplatform/gcsfuse/v3@v3.13.0/tools/integration_tests/operations/rename_file_test.go:78\x0e"),
		out("TestOps/TestRename", "\x0f        \tError:      \tReceived unexpected error:\x0e"),
		out("TestOps/TestRename", "\x0f        \t            \trename a b: input/output error\x0e"),
		out("TestOps/TestRename", "\x0f        \tTest:       \tTestOps/TestRename\x0e"),
		event{Action: "fail", Test: "TestOps/TestRename", Elapsed: 0.02},
		event{Action: "run", Test: "TestOps/TestStat"},
		event{Action: "pass", Test: "TestOps/TestStat", Elapsed: 0.01},
		event{Action: "run", Test: "TestOps/TestRapid"},
		out("TestOps/TestRapid", "    operations_test.go:12: Rapid writes tests are only applicable to Rapid Cache Ultra buckets"),
		event{Action: "skip", Test: "TestOps/TestRapid"},
		event{Action: "run", Test: "TestOps/TestSilent"},
		event{Action: "skip", Test: "TestOps/TestSilent"},
		event{Action: "fail", Test: "TestOps", Elapsed: 0.05},
		event{Action: "run", Test: "TestPlain"},
		out("TestPlain", "=== RUN   TestPlain"),
		out("TestPlain", "\x0f    move_file_test.go:56: Error in moving file: Input/output error\x0e"),
		out("TestPlain", "\x0f    move_file_test.go:63: ReadAll: no such file\x0e"),
		event{Action: "fail", Test: "TestPlain"},
		event{Action: "run", Test: "TestCrash"},
		out("TestCrash", "\x0f    rename_dir_test.go:190: An error is expected but got nil.\x0e"),
		event{Action: "run", Test: "TestParallel"},
		// test2json gives the panic to the test last named.
		out("TestCrash", "panic: runtime error: index out of range [1] with length 1"),
		event{Action: "output", Output: "goroutine 14 [running]:\n"},
	)
	tests, pkgAction, pkgOut, err := parseTest2JSON(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if pkgAction != "" || len(pkgOut) != 1 {
		t.Errorf("package: action %q, output %q", pkgAction, pkgOut)
	}
	got := map[string]TestResult{}
	var order []string
	for _, tr := range tests {
		got[tr.Name] = tr
		order = append(order, tr.Name)
	}
	if strings.Join(order, " ") != "TestOps TestOps/TestRename TestOps/TestStat TestOps/TestRapid TestOps/TestSilent TestPlain TestCrash TestParallel" {
		t.Errorf("order %q", order)
	}
	want := map[string]TestResult{
		"TestOps/TestRename": {Action: "fail", Seconds: 0.02, Reason: "operations/rename_file_test.go:78: Received unexpected error: rename a b: input/output error"},
		"TestOps/TestStat":   {Action: "pass", Seconds: 0.01},
		"TestOps/TestRapid":  {Action: "skip", Reason: "operations_test.go:12: Rapid writes tests are only applicable to Rapid Cache Ultra buckets"},
		"TestOps/TestSilent": {Action: "skip", Reason: "skipped itself without a message"},
		"TestPlain":          {Action: "fail", Reason: "move_file_test.go:56: Error in moving file: Input/output error"},
		"TestCrash":          {Action: "fail", Reason: "did not finish: rename_dir_test.go:190: An error is expected but got nil.; then panic: runtime error: index out of range [1] with length 1"},
		"TestParallel":       {Action: "fail", Reason: "did not finish: panic: runtime error: index out of range [1] with length 1"},
	}
	for name, w := range want {
		g := got[name]
		w.Name = name
		if g != w {
			t.Errorf("%s:\n got %+v\nwant %+v", name, g, w)
		}
	}
	if l := leaves(tests); len(l) != 7 {
		t.Errorf("leaves: %d, want 7 (all but TestOps)", len(l))
	}
}

func TestPackageFailure(t *testing.T) {
	for _, c := range []struct {
		out  []string
		want string
	}{
		{[]string{"2026/01/01 setup.go:12: No configuration found for operations tests in config.", "exit status 1"}, "2026/01/01 setup.go:12: No configuration found for operations tests in config."},
		{[]string{"=== RUN TestX", "panic: test timed out after 5m0s", "\trunning tests:"}, "panic: test timed out after 5m0s"},
		{[]string{"ok"}, "ok"},
		{nil, "(no output)"},
	} {
		if got := packageFailure(c.out); got != c.want {
			t.Errorf("packageFailure(%q) = %q, want %q", c.out, got, c.want)
		}
	}
}

func TestCounts(t *testing.T) {
	s := SuiteReport{Tests: []TestResult{fail("TestA", ""), pass("TestA/x"), fail("TestA/y", "e"), skip("TestB", ""), pass("TestC")}}
	if p, f, sk := s.counts(); p != 2 || f != 1 || sk != 1 {
		t.Errorf("counts() = %d, %d, %d; want 2, 1, 1", p, f, sk)
	}
}
