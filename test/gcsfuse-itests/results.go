package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Report is one run's results: a JSON file that compare reads.
type Report struct {
	// Mode is standalone, mounted or driver.
	Mode   string        `json:"mode"`
	Suites []SuiteReport `json:"suites"`
}

// SuiteReport is one suite's run.
type SuiteReport struct {
	Suite   string `json:"suite"`
	Package string `json:"package"`
	// Options are the mount's (the driver's mountOptions form).
	Options string  `json:"options"`
	Dir     string  `json:"dir"`
	Bucket  string  `json:"bucket"`
	Seconds float64 `json:"seconds"`
	// Error is the run's own failure: no mount, no binary, a binary that ended before its
	// tests did. Its tests then hold what did run.
	Error string `json:"error,omitempty"`
	// Excluded are the tests the suite leaves out (-test.skip) and why.
	Excluded []Exclusion `json:"excluded,omitempty"`
	// Refused are the hosts the tests tried to reach through the control plane's proxy other
	// than the Storage Control API's.
	Refused []string     `json:"refused,omitempty"`
	Tests   []TestResult `json:"tests"`
}

// Exclusion is a -test.skip pattern and its reason.
type Exclusion struct {
	Pattern string `json:"pattern"`
	Why     string `json:"why"`
}

// TestResult is one test's (or subtest's) outcome.
type TestResult struct {
	Name    string  `json:"name"`
	Action  string  `json:"action"` // pass, fail, skip
	Seconds float64 `json:"seconds"`
	// Reason is the first line of a failure, or a skip's message.
	Reason string `json:"reason,omitempty"`
}

// packageTest is the name of the pseudo-test that holds a failure outside any test: a
// TestMain that exits, a binary that crashes or times out, a mount that never came.
const packageTest = "(package)"

// counts returns how many of the suite's tests passed, failed and were skipped, counting
// leaves only (see leaves).
func (s SuiteReport) counts() (pass, fail, skip int) {
	for _, t := range leaves(s.Tests) {
		switch t.Action {
		case "pass":
			pass++
		case "fail":
			fail++
		case "skip":
			skip++
		}
	}
	return
}

// leaves returns the tests that are not the parent of another: a parent's outcome follows
// from its subtests'. A parent that failed while none of its subtests did (a suite's setup
// failed, say) is kept, since nothing else carries that failure.
func leaves(tests []TestResult) []TestResult {
	var out []TestResult
	for _, t := range tests {
		parent, childFailed := false, false
		for _, u := range tests {
			if strings.HasPrefix(u.Name, t.Name+"/") {
				parent = true
				childFailed = childFailed || u.Action == "fail"
			}
		}
		if !parent || (t.Action == "fail" && !childFailed) {
			out = append(out, t)
		}
	}
	return out
}

// event is one line of test2json's output.
type event struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// parseTest2JSON reads test2json's events and returns each test's outcome, in the order they
// started, and the package's own output and outcome (its last action: pass or fail, "" when
// the stream ended first). A test that started and never ended (the binary was killed or
// panicked) fails with the package's last lines as its reason.
func parseTest2JSON(r io.Reader) (tests []TestResult, pkgAction string, pkgOutput []string, err error) {
	type state struct {
		res    TestResult
		output []string
		ended  bool
	}
	byName := map[string]*state{}
	var order []string
	var all []string // every line, whoever test2json gave it to: a panic goes to a test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			// test2json writes only events; anything else would be its own complaint.
			pkgOutput = append(pkgOutput, sc.Text())
			continue
		}
		if e.Action == "output" {
			all = append(all, strings.TrimRight(e.Output, "\n"))
		}
		if e.Test == "" {
			switch e.Action {
			case "output":
				pkgOutput = append(pkgOutput, strings.TrimRight(e.Output, "\n"))
			case "pass", "fail":
				pkgAction = e.Action
			}
			continue
		}
		st := byName[e.Test]
		if st == nil {
			st = &state{res: TestResult{Name: e.Test}}
			byName[e.Test] = st
			order = append(order, e.Test)
		}
		switch e.Action {
		case "output":
			st.output = append(st.output, strings.TrimRight(e.Output, "\n"))
		case "pass", "fail", "skip":
			st.res.Action, st.res.Seconds, st.ended = e.Action, e.Elapsed, true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", nil, err
	}
	for _, n := range order {
		st := byName[n]
		switch {
		case !st.ended:
			// Killed or crashed: what it reported before, then what ended the binary.
			st.res.Action = "fail"
			st.res.Reason = "did not finish: " + unfinished(st.output, unmark(all))
		case st.res.Action == "fail":
			st.res.Reason = failureReason(st.output)
		case st.res.Action == "skip":
			st.res.Reason = skipReason(unmark(st.output))
			if st.res.Reason == "" {
				st.res.Reason = "skipped itself without a message"
			}
		}
		tests = append(tests, st.res)
	}
	return tests, pkgAction, unmark(pkgOutput), nil
}

// unfinished is why a test that never ended failed: its own failure, if it reported one,
// then what ended the binary (a panic, a timeout: found in all of its output, since
// test2json gives a panic's lines to whichever test was last named).
func unfinished(test, all []string) string {
	end := crash(all)
	if end == "" {
		end = "the binary ended first"
	}
	for _, l := range test {
		if strings.HasPrefix(l, "\x0f") {
			return clip(failureReason(test) + "; then " + end)
		}
	}
	return end
}

// crash is the first line of a panic or a fatal error in the output ("" if none).
func crash(output []string) string {
	for _, l := range output {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "panic:") || strings.HasPrefix(t, "fatal error:") {
			return clip(t)
		}
	}
	return ""
}

// noise are the lines of a test's output that say nothing about why it failed.
func noise(l string) bool {
	t := strings.TrimSpace(l)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP", "Error Trace:", "Test:", "Messages:"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return t == "" || strings.HasSuffix(t, ".go:") || // testify's "file.go:NN: " lead-in line
		strings.Contains(t, "Running tests with flags")
}

// failureReason is the first informative line of a failed test's output: testify's
// "Error:" message with the line after it (what was expected), or the first line of a
// t.Errorf, prefixed with where it was raised when the output says. test2json marks the
// lines of t.Error and friends (^O ... ^N); the first marked line goes first.
func failureReason(output []string) string {
	for i, l := range output {
		if strings.HasPrefix(l, "\x0f") {
			output = output[i:]
			break
		}
	}
	output = unmark(output)
	where := ""
	for i, l := range output {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "Error Trace:") && where == "" {
			where = strings.TrimSpace(strings.TrimPrefix(t, "Error Trace:"))
			continue
		}
		if strings.HasPrefix(t, "Error:") {
			msg := strings.TrimSpace(strings.TrimPrefix(t, "Error:"))
			for _, next := range output[i+1:] {
				n := strings.TrimSpace(next)
				if n == "" || strings.HasPrefix(n, "Test:") || strings.HasPrefix(n, "Messages:") || strings.HasPrefix(n, "---") {
					break
				}
				msg += " " + n
				if len(msg) > 300 {
					break
				}
			}
			return clip(prefix(where, msg))
		}
	}
	for _, l := range output {
		if !noise(l) {
			return clip(strings.TrimSpace(l))
		}
	}
	return "failed (no output)"
}

// unmark drops test2json's ^O and ^N marks.
func unmark(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Map(func(r rune) rune {
			if r == 0x0e || r == 0x0f {
				return -1
			}
			return r
		}, l)
	}
	return out
}

func prefix(where, msg string) string {
	if where == "" {
		return msg
	}
	return where + ": " + msg
}

// skipReason is a skipped test's message.
func skipReason(output []string) string {
	for _, l := range output {
		if !noise(l) {
			return clip(strings.TrimSpace(l))
		}
	}
	return ""
}

// lastLines is the last informative line of a test's output, else of the package's.
func lastLines(pkg, test []string) string {
	for _, out := range [][]string{test, pkg} {
		for i := len(out) - 1; i >= 0; i-- {
			if !noise(out[i]) && !strings.HasPrefix(strings.TrimSpace(out[i]), "FAIL") {
				return clip(strings.TrimSpace(out[i]))
			}
		}
	}
	return "(no output)"
}

// packageFailure is the reason a binary failed outside its tests: a panic (a crash, a
// -test.timeout) first, else the first line that says something failed (a TestMain's
// log.Fatal), else the last informative line.
func packageFailure(output []string) string {
	if c := crash(output); c != "" {
		return c
	}
	for _, l := range output {
		t := strings.TrimSpace(l)
		for _, w := range []string{"No configuration", "Error", "error", "failed", "Failed", "not set"} {
			if strings.Contains(t, w) && !strings.HasPrefix(t, "---") {
				return clip(t)
			}
		}
	}
	return lastLines(output, nil)
}

func clip(s string) string {
	// Upstream's sources are named by their path in the module cache: keep the package's part.
	if i := strings.Index(s, "tools/integration_tests/"); i >= 0 {
		j := strings.LastIndexAny(s[:i], " \t:")
		s = s[:j+1] + s[i+len("tools/integration_tests/"):]
	}
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// readReport reads a results file.
func readReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// writeReport writes r to path, with the suites in the default set's order.
func writeReport(path string, r *Report) error {
	rank := map[string]int{}
	for i, s := range suites {
		rank[s.Name] = i
	}
	sort.SliceStable(r.Suites, func(i, j int) bool { return rank[r.Suites[i].Suite] < rank[r.Suites[j].Suite] })
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// merge puts s into r, replacing an earlier run of the same suite.
func (r *Report) merge(s SuiteReport) {
	for i := range r.Suites {
		if r.Suites[i].Suite == s.Suite {
			r.Suites[i] = s
			return
		}
	}
	r.Suites = append(r.Suites, s)
}

// table prints per suite: passed, failed, skipped (leaves), seconds; then each failure's
// reason.
func (r *Report) table(w io.Writer) {
	fmt.Fprintf(w, "%-36s %5s %5s %5s %8s\n", "suite ("+r.Mode+")", "pass", "fail", "skip", "seconds")
	var tp, tf, ts int
	var sec float64
	for _, s := range r.Suites {
		p, f, sk := s.counts()
		tp, tf, ts, sec = tp+p, tf+f, ts+sk, sec+s.Seconds
		fmt.Fprintf(w, "%-36s %5d %5d %5d %8.1f\n", s.Suite, p, f, sk, s.Seconds)
	}
	fmt.Fprintf(w, "%-36s %5d %5d %5d %8.1f\n", "total", tp, tf, ts, sec)
	for _, s := range r.Suites {
		if s.Error != "" {
			fmt.Fprintf(w, "\n%s: %s\n", s.Suite, s.Error)
		}
		for _, t := range leaves(s.Tests) {
			if t.Action == "fail" {
				fmt.Fprintf(w, "FAIL %s %s: %s\n", s.Suite, t.Name, t.Reason)
			}
		}
		for _, e := range s.Excluded {
			fmt.Fprintf(w, "EXCLUDED %s -test.skip %s: %s\n", s.Suite, e.Pattern, e.Why)
		}
		if len(s.Refused) > 0 {
			fmt.Fprintf(w, "REFUSED %s: tests tried to reach %s\n", s.Suite, strings.Join(s.Refused, ", "))
		}
	}
}
