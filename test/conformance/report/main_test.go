package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// sample is shaped like e2e.test's junit_01.xml (Ginkgo v2, OmitFailureMessageAttr).
const sample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="0" errors="0" failures="2" time="90">
  <testsuite name="Kubernetes e2e suite" package="/" tests="6">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-storage] External Storage [Driver: d.example] [Testpattern: CSI Ephemeral-volume (default fs)] ephemeral should create read-only inline ephemeral volume" status="passed" time="12.5"></testcase>
    <testcase name="[It] [sig-storage] External Storage [Driver: d.example] [Testpattern: CSI Ephemeral-volume (default fs)] ephemeral should support multiple inline ephemeral volumes" status="failed" time="30"><failure type="failed">[FAILED] timed out waiting for the condition&#xA;In [It] at: x.go:1</failure></testcase>
    <testcase name="[It] [sig-storage] External Storage [Driver: d.example] [Testpattern: Dynamic PV (default fs)] provisioning should provision storage" status="skipped" time="0"><skipped message="skipped - Driver &#34;d.example&#34; does not support volume type &#34;DynamicPV&#34; - skipping"></skipped></testcase>
    <testcase name="[It] [sig-storage] External Storage [Driver: d.example] [Testpattern: Dynamic PV (default fs)] disruptive [Disruptive] should survive" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-storage] External Storage [Driver: d.example] [Testpattern: Pre-provisioned PV (default fs)] subPath should fail" status="failed" time="3"><failure type="failed">[FAILED] known one</failure></testcase>
    <testcase name="[It] [sig-storage] Other thing should work" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>
</testsuites>`

// TestClassify: the driver's specs only, each with the state and the reason a reader needs;
// a listed failure stops counting as one, an unlisted one makes the run fail.
func TestClassify(t *testing.T) {
	ks := []known{{regexp.MustCompile(`subPath should fail`), "gcsfuse has no hard links"}}
	rs, err := classify(strings.NewReader(sample), "d.example", nil, regexp.MustCompile(`\[Disruptive\]|\[Slow\]`), ks)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]result{}
	for _, r := range rs {
		got[r.name] = r
	}
	if len(got) != 5 {
		t.Fatalf("want the driver's 5 specs, got %d: %v", len(got), rs)
	}
	want := map[string][2]string{
		"[Testpattern: CSI Ephemeral-volume (default fs)] ephemeral should create read-only inline ephemeral volume":  {"passed", ""},
		"[Testpattern: CSI Ephemeral-volume (default fs)] ephemeral should support multiple inline ephemeral volumes": {"failed", "timed out waiting for the condition"},
		"[Testpattern: Dynamic PV (default fs)] provisioning should provision storage":                                {"skipped", `Driver "d.example" does not support volume type "DynamicPV" - skipping`},
		"[Testpattern: Dynamic PV (default fs)] disruptive [Disruptive] should survive":                               {"skipped", "not run: excluded by -ginkgo.skip"},
		"[Testpattern: Pre-provisioned PV (default fs)] subPath should fail":                                          {"known", "gcsfuse has no hard links"},
	}
	for name, w := range want {
		r, ok := got[name]
		if !ok {
			t.Errorf("missing %q", name)
			continue
		}
		if r.state != w[0] || r.reason != w[1] {
			t.Errorf("%q: got %s %q, want %s %q", name, r.state, r.reason, w[0], w[1])
		}
	}

	if n := passed(rs); n != 1 {
		t.Errorf("passed: got %d, want 1", n)
	}
	var out bytes.Buffer
	if n := write(&out, rs); n != 1 {
		t.Errorf("unexpected failures: got %d, want 1 (the known one does not count)", n)
	}
	for _, s := range []string{
		"passed 1, failed 1 (+1 known, listed with their upstream reason), skipped 2, of 5 tests",
		"| skipped: 1 tests | Dynamic PV (default fs) | not run: excluded by -ginkgo.skip (tests with [Disruptive] 1) |",
		"| failed (known) | [Testpattern: Pre-provisioned PV (default fs)] subPath should fail | gcsfuse has no hard links |",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

// TestNoDriverSpecs: a report without the driver's tests (the driver definition not loaded)
// is an error, never an empty green table.
func TestNoDriverSpecs(t *testing.T) {
	if _, err := classify(strings.NewReader(sample), "other.example", nil, nil, nil); err == nil {
		t.Fatal("want an error for a report without the driver's specs")
	}
}

// TestMergeShards: a run split across two processes, each with its own focus, reports every
// spec twice; each test counts with what the shard that ran it says, and a test neither ran
// stays "not run".
func TestMergeShards(t *testing.T) {
	a := []result{
		{name: "t1", state: "passed"},
		{name: "t2", state: "skipped", reason: notRun},
		{name: "t3", state: "skipped", reason: notRun},
		{name: "t4", state: "skipped", reason: "no block mode"},
	}
	b := []result{
		{name: "t1", state: "skipped", reason: notRun},
		{name: "t2", state: "failed", reason: "boom"},
		{name: "t3", state: "skipped", reason: notRun},
		{name: "t4", state: "skipped", reason: notRun},
	}
	got := map[string]result{}
	for _, r := range merge([][]result{a, b}) {
		got[r.name] = r
	}
	want := map[string][2]string{"t1": {"passed", ""}, "t2": {"failed", "boom"}, "t3": {"skipped", notRun}, "t4": {"skipped", "no block mode"}}
	if len(got) != len(want) {
		t.Fatalf("merged %d tests, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		if r := got[name]; r.state != w[0] || r.reason != w[1] {
			t.Errorf("%s: got %s %q, want %s %q", name, r.state, r.reason, w[0], w[1])
		}
	}
}

// TestSuitesAndUnexplainedSkips: the table opens with a row per testsuite, and a spec that
// was skipped without a reason (the suite gave none, the skip pattern matches none of its
// tags: a focus that missed it) is unexplained, which fails the run; the same spec left out
// by a tag of the skip pattern is explained by it.
func TestSuitesAndUnexplainedSkips(t *testing.T) {
	rs, err := classify(strings.NewReader(sample), "d.example", nil, regexp.MustCompile(`\[Disruptive\]`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := unexplainedSkips(rs); len(u) != 0 {
		t.Errorf("skips explained by the pattern or the suite reported as unexplained: %v", u)
	}
	var out bytes.Buffer
	write(&out, rs)
	for _, s := range []string{
		"| suite | passed | failed | failed (known) | skipped |\n|---|---|---|---|---|\n| ephemeral | 1 | 1 | 0 | 0 |\n",
		"| disruptive | 0 | 0 | 0 | 1 |\n",
		"| provisioning | 0 | 0 | 0 | 1 |\n",
		"| subPath | 0 | 1 | 0 | 0 |\n",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}

	rs, err = classify(strings.NewReader(sample), "d.example", nil, regexp.MustCompile(`\[Slow\]`), nil)
	if err != nil {
		t.Fatal(err)
	}
	u := unexplainedSkips(rs)
	if len(u) != 1 || !strings.Contains(u[0].name, "disruptive [Disruptive] should survive") {
		t.Fatalf("unexplained skips %v, want the [Disruptive] spec that -skip does not name", u)
	}
}

// TestFocusExplainsLeftOut: in a run narrowed by -focus, a spec outside the focus is left out
// by it, a reason, not an unexplained skip; one inside it and not skipped by a tag still is.
func TestFocusExplainsLeftOut(t *testing.T) {
	rs, err := classify(strings.NewReader(sample), "d.example", regexp.MustCompile(`subPath`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if strings.Contains(r.name, "disruptive [Disruptive]") && r.reason != notFocused {
			t.Errorf("%s: reason %q, want %q", r.name, r.reason, notFocused)
		}
	}
	if u := unexplainedSkips(rs); len(u) != 0 {
		t.Errorf("specs outside the focus reported as unexplained: %v", u)
	}
	rs, err = classify(strings.NewReader(sample), "d.example", regexp.MustCompile(`Driver: d\.example`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := unexplainedSkips(rs); len(u) != 1 {
		t.Errorf("a focused spec skipped without a reason: unexplained %v, want the [Disruptive] one", u)
	}
}
