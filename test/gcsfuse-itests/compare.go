package main

import (
	"fmt"
	"io"
	"sort"
)

// Class is how a test fared through the driver against standalone gcsfuse.
type Class string

// The classes, from the test's outcome standalone (the reference) and mounted.
const (
	// Pass: passed both.
	Pass Class = "pass"
	// EmulatorGap: failed both; gcsfuse itself fails it here, so it is the emulator (or this
	// machine) that lacks something, not the driver. Its reason is the standalone failure.
	EmulatorGap Class = "emulator gap"
	// DriverBug: passed standalone, failed (or went missing) through the driver.
	DriverBug Class = "driver bug"
	// MountedOnly: failed standalone, passed through the driver: a flaky test or a
	// standalone setup problem; nothing the driver broke.
	MountedOnly Class = "passed mounted only"
	// Skipped: skipped in either run (the skip's message is kept).
	Skipped Class = "skipped"
	// NotRun: the mounted run has no results for the suite at all (the caller ran a subset).
	NotRun Class = "suite not run mounted"
	// NewMounted: ran mounted only; no reference to judge it by.
	NewMounted Class = "not in the standalone run"
)

// Verdict is one test's classification.
type Verdict struct {
	Suite, Test string
	Class       Class
	// Reason: for a gap or a mounted-only pass, the standalone failure; for a driver bug
	// the mounted failure; for a skip, its message.
	Reason string
}

// classify compares a standalone run (the reference) with a mounted one, test by test
// (leaves only: a parent's outcome follows from its subtests'), in the reference's order,
// then what only the mounted run has.
func classify(standalone, mounted *Report) []Verdict {
	type key struct{ suite, test string }
	got := map[key]TestResult{}
	ranSuite := map[string]bool{}
	for _, s := range mounted.Suites {
		ranSuite[s.Suite] = true
		for _, t := range leaves(s.Tests) {
			got[key{s.Suite, t.Name}] = t
		}
	}
	var out []Verdict
	seen := map[key]bool{}
	for _, s := range standalone.Suites {
		for _, ref := range leaves(s.Tests) {
			k := key{s.Suite, ref.Name}
			seen[k] = true
			v := Verdict{Suite: s.Suite, Test: ref.Name}
			m, ok := got[k]
			switch {
			case !ranSuite[s.Suite]:
				v.Class = NotRun
			case ref.Action == "skip":
				v.Class, v.Reason = Skipped, ref.Reason
			case ok && m.Action == "skip":
				v.Class, v.Reason = Skipped, "mounted: "+m.Reason
			case !ok:
				if ref.Action == "pass" {
					v.Class, v.Reason = DriverBug, "passed standalone; no result mounted (the run ended before it, or it was renamed)"
				} else {
					v.Class, v.Reason = EmulatorGap, ref.Reason
				}
			case ref.Action == "pass" && m.Action == "pass":
				v.Class = Pass
			case ref.Action == "pass":
				v.Class, v.Reason = DriverBug, m.Reason
			case m.Action == "pass":
				v.Class, v.Reason = MountedOnly, ref.Reason
			default:
				v.Class, v.Reason = EmulatorGap, ref.Reason
			}
			out = append(out, v)
		}
	}
	var extra []Verdict
	for k, m := range got {
		if !seen[k] {
			v := Verdict{Suite: k.suite, Test: k.test, Class: NewMounted, Reason: m.Reason}
			if m.Action == "skip" {
				v.Class = Skipped
			}
			extra = append(extra, v)
		}
	}
	sort.Slice(extra, func(i, j int) bool {
		if extra[i].Suite != extra[j].Suite {
			return extra[i].Suite < extra[j].Suite
		}
		return extra[i].Test < extra[j].Test
	})
	return append(out, extra...)
}

// printVerdicts prints the classification: counts per class, then every test that did not
// pass both, and reports whether any is a driver bug.
func printVerdicts(w io.Writer, vs []Verdict) (driverBugs int) {
	counts := map[Class]int{}
	for _, v := range vs {
		counts[v.Class]++
	}
	order := []Class{Pass, EmulatorGap, DriverBug, MountedOnly, Skipped, NotRun, NewMounted}
	for _, c := range order {
		if counts[c] > 0 {
			fmt.Fprintf(w, "%-26s %d\n", c+":", counts[c])
		}
	}
	for _, c := range order[1:] {
		for _, v := range vs {
			if v.Class == c {
				fmt.Fprintf(w, "%s: %s %s", c, v.Suite, v.Test)
				if v.Reason != "" {
					fmt.Fprintf(w, ": %s", v.Reason)
				}
				fmt.Fprintln(w)
			}
		}
	}
	return counts[DriverBug]
}
