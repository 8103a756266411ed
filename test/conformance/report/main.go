// Command report reads the JUnit report of Kubernetes' storage e2e suite (e2e.test
// -report-dir) and prints what hack/conformance.sh shows: every test of one driver that ran,
// passed or failed, and the skipped ones grouped by the reason the suite gave, as a
// Markdown table: docs/conformance.md holds it as its generated block
// "conformance" (hack/conformance.sh keeps it in table.md; go run ./hack/readme -block
// conformance -file docs/conformance.md < table.md puts it there), a row per testsuite first. It exits
// 1 when a test failed that the known-failures file does not list with its upstream reason,
// so CI fails on a new failure and not on a documented one, and when a test was skipped
// without a reason (neither the suite's nor a tag that the skip pattern matches).
//
// The suite's JUnit report lists every spec of the binary, thousands; only the driver's
// ("[Driver: NAME]") are counted. A spec that the -ginkgo.focus/-ginkgo.skip patterns left
// out carries no reason of its own ("skipped"): it is reported as excluded by the skip
// pattern, with the tags of its name that the pattern matched.
package main

import (
	"bufio"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// suites is the root of a Ginkgo JUnit report.
type suites struct {
	Suites []struct {
		Cases []testCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type testCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Text string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Text string `xml:",chardata"`
	} `xml:"error"`
}

// known is one line of the known-failures file: a test name pattern and why it fails upstream.
type known struct {
	re     *regexp.Regexp
	reason string
}

// result is one test of the driver, classified.
type result struct {
	name   string // without the common "[sig-storage] External Storage [Driver: X] " prefix
	state  string // passed, failed, known, skipped
	reason string // skip reason, failure's first line, or the known failure's upstream reason
	secs   float64
	tags   []string // for a spec left out by the skip pattern: the tags it matched
}

func main() {
	junit := flag.String("junit", "", "JUnit report(s) of the suite's run (junit_01.xml), comma separated: one per shard of a run split across processes")
	driver := flag.String("driver", "", "driver name, as in the suite's [Driver: NAME]")
	focus := flag.String("focus", "", "the -ginkgo.focus pattern of the run: a spec outside it was left out by it")
	skip := flag.String("skip", "", "the -ginkgo.skip pattern of the run, to name why a spec was left out")
	knownFile := flag.String("known", "", "known failures: one `REGEXP<TAB>upstream reason` a line, # comments")
	flag.Parse()
	if *junit == "" || *driver == "" {
		fmt.Fprintln(os.Stderr, "report: -junit and -driver are required")
		os.Exit(2)
	}
	rs, err := load(*junit, *driver, *focus, *skip, *knownFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	unexpected := write(os.Stdout, rs)
	unexplained := unexplainedSkips(rs)
	if unexpected > 0 {
		fmt.Fprintf(os.Stderr, "report: %d failure(s) not listed in %s with an upstream reason\n", unexpected, *knownFile)
	}
	for _, r := range unexplained {
		fmt.Fprintf(os.Stderr, "report: skipped without a reason: %s (the suite gave none, and no tag of its name matches -skip)\n", r.name)
	}
	if unexpected > 0 || len(unexplained) > 0 {
		os.Exit(1)
	}
	if passed(rs) == 0 {
		// Every test skipped (a driver definition that lost its inline volumes, say) is no
		// evidence of anything: fail rather than print a green table.
		fmt.Fprintln(os.Stderr, "report: no test of the driver passed")
		os.Exit(1)
	}
}

// load reads the reports (comma separated paths: the shards of one run) and the known
// failures, and classifies the driver's tests. Every shard's report lists every spec; a spec
// counts with what the shard that ran it says (merge).
func load(junitPaths, driver, focus, skip, knownPath string) ([]result, error) {
	var ks []known
	var err error
	if knownPath != "" {
		if ks, err = readKnown(knownPath); err != nil {
			return nil, err
		}
	}
	var skipRE *regexp.Regexp
	if skip != "" {
		if skipRE, err = regexp.Compile(skip); err != nil {
			return nil, fmt.Errorf("skip pattern %q: %w", skip, err)
		}
	}
	var focusRE *regexp.Regexp
	if focus != "" {
		if focusRE, err = regexp.Compile(focus); err != nil {
			return nil, fmt.Errorf("focus pattern %q: %w", focus, err)
		}
	}
	var shards [][]result
	for _, path := range strings.Split(junitPaths, ",") {
		rs, err := loadOne(strings.TrimSpace(path), driver, focusRE, skipRE, ks)
		if err != nil {
			return nil, err
		}
		shards = append(shards, rs)
	}
	return merge(shards), nil
}

func loadOne(path, driver string, focus, skip *regexp.Regexp, ks []known) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open report: %w", err)
	}
	defer f.Close()
	return classify(f, driver, focus, skip, ks)
}

// merge joins the shards' results by test: what a shard that ran the test says wins over a
// shard whose patterns left it out (rank).
func merge(shards [][]result) []result {
	if len(shards) == 1 {
		return shards[0]
	}
	byName := map[string]result{}
	for _, rs := range shards {
		for _, r := range rs {
			if cur, ok := byName[r.name]; !ok || rank(r) > rank(cur) {
				byName[r.name] = r
			}
		}
	}
	out := make([]result, 0, len(byName))
	for _, r := range byName {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}

// rank orders what a shard says of a test: left out by its patterns < skipped by the test
// itself < passed < failed (known or not).
func rank(r result) int {
	switch {
	case r.state == "skipped" && r.reason == notRun:
		return 0
	case r.state == "skipped":
		return 1
	case r.state == "passed":
		return 2
	}
	return 3
}

// readKnown parses the known-failures file.
func readKnown(path string) ([]known, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open known failures: %w", err)
	}
	defer f.Close()
	var ks []known
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pat, reason, ok := strings.Cut(line, "\t")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want REGEXP<TAB>upstream reason", path, n)
		}
		re, err := regexp.Compile(pat)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		ks = append(ks, known{re, strings.TrimSpace(reason)})
	}
	return ks, sc.Err()
}

// classify keeps the driver's It specs of the report and gives each its state and reason.
func classify(r io.Reader, driver string, focus, skip *regexp.Regexp, ks []known) ([]result, error) {
	var s suites
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("parse JUnit report: %w", err)
	}
	tag := "[Driver: " + driver + "]"
	var rs []result
	for _, su := range s.Suites {
		for _, c := range su.Cases {
			i := strings.Index(c.Name, tag)
			if !strings.HasPrefix(c.Name, "[It] ") || i < 0 {
				continue
			}
			res := result{name: strings.TrimSpace(c.Name[i+len(tag):]), secs: c.Time}
			switch {
			case c.Failure != nil || c.Error != nil:
				res.state, res.reason = "failed", firstLine(c)
				for _, k := range ks {
					if k.re.MatchString(c.Name) {
						res.state, res.reason = "known", k.reason
						break
					}
				}
			case c.Skipped != nil:
				res.state = "skipped"
				res.reason = strings.TrimSpace(strings.TrimPrefix(c.Skipped.Message, "skipped"))
				res.reason = strings.TrimSpace(strings.TrimPrefix(res.reason, "-"))
				switch {
				case res.reason != "":
				case focus != nil && !focus.MatchString(specText(c.Name)):
					res.reason = notFocused
				default:
					res.reason, res.tags = notRun, leftOutBy(c.Name, skip)
				}
			default:
				res.state = "passed"
			}
			rs = append(rs, res)
		}
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("no test of %s in the report: did the driver's suites run (focus, driver name)?", tag)
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].name < rs[b].name })
	return rs, nil
}

// tagRE finds the bracketed tags of a spec name ("[Slow]", "[Feature:X]").
var tagRE = regexp.MustCompile(`\[[^\]]+\]`)

// notRun is the reason of every spec the run's skip pattern left out; leftOutBy names the
// tags that did it, which the table counts. notFocused is the reason of a spec outside the
// run's focus (a run narrowed with CONFORMANCE_FOCUS).
const (
	notRun     = "not run: excluded by -ginkgo.skip"
	notFocused = "not run: outside -ginkgo.focus"
)

// specText is a JUnit test name as Ginkgo matches -ginkgo.focus against it: without the
// "[It] " node type in front.
func specText(name string) string { return strings.TrimPrefix(name, "[It] ") }

// leftOutBy returns the tags of a spec name that the run's skip pattern matches.
func leftOutBy(name string, skip *regexp.Regexp) []string {
	var hit []string
	if skip == nil {
		return nil
	}
	for _, t := range tagRE.FindAllString(name, -1) {
		if skip.MatchString(t) {
			hit = append(hit, t)
		}
	}
	return hit
}

// firstLine is the first non-empty line of a failure, the suite's own summary of it.
func firstLine(c testCase) string {
	text := ""
	if c.Failure != nil {
		text = c.Failure.Text
	} else {
		text = c.Error.Text
	}
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "[FAILED]")); l != "" {
			return truncate(l, 200)
		}
	}
	return "failed"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// unexplainedSkips are the skipped tests with no reason: the suite gave none and the run's
// skip pattern matches no tag of their name (a focus that missed them, a suite that skipped
// without saying why). A table that cannot say why a test did not run proves nothing of it.
func unexplainedSkips(rs []result) []result {
	var out []result
	for _, r := range rs {
		if r.state == "skipped" && (r.reason == "" || (r.reason == notRun && len(r.tags) == 0)) {
			out = append(out, r)
		}
	}
	return out
}

// suiteRE finds the testsuite in a spec name: the word after the test pattern
// ("[Testpattern: Pre-provisioned PV (default fs)] subPath should ..." is subPath's).
var suiteRE = regexp.MustCompile(`^\[Testpattern: [^\]]+\]\s+(?:\[[^\]]+\]\s+)*(\S+)`)

// suiteOf is the testsuite of a spec name, "(other)" for a name without a pattern.
func suiteOf(name string) string {
	if m := suiteRE.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return "(other)"
}

// writeSuites writes one row per testsuite: its passed, failed (known ones apart) and
// skipped tests, the suites with a passed test first.
func writeSuites(w io.Writer, rs []result) {
	type counts struct{ passed, failed, known, skipped int }
	by := map[string]*counts{}
	for _, r := range rs {
		c := by[suiteOf(r.name)]
		if c == nil {
			c = &counts{}
			by[suiteOf(r.name)] = c
		}
		switch r.state {
		case "passed":
			c.passed++
		case "failed":
			c.failed++
		case "known":
			c.known++
		default:
			c.skipped++
		}
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Slice(names, func(a, b int) bool {
		if (by[names[a]].passed > 0) != (by[names[b]].passed > 0) {
			return by[names[a]].passed > 0
		}
		return names[a] < names[b]
	})
	fmt.Fprintln(w, "| suite | passed | failed | failed (known) | skipped |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, n := range names {
		c := by[n]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", n, c.passed, c.failed, c.known, c.skipped)
	}
	fmt.Fprintln(w)
}

// write writes the per-suite table, the per-test table (skips grouped by reason) and the
// totals; it returns the number of failures not known.
func write(w io.Writer, rs []result) int {
	writeSuites(w, rs)
	count := map[string]int{}
	type group struct {
		n        int
		patterns map[string]bool
		tags     map[string]int
	}
	skips := map[string]*group{}
	fmt.Fprintln(w, "| result | test | reason |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range rs {
		count[r.state]++
		switch r.state {
		case "skipped":
			g := skips[r.reason]
			if g == nil {
				g = &group{patterns: map[string]bool{}, tags: map[string]int{}}
				skips[r.reason] = g
			}
			g.n++
			g.patterns[pattern(r.name)] = true
			for _, t := range uniq(r.tags) {
				g.tags[t]++
			}
		case "known":
			fmt.Fprintf(w, "| failed (known) | %s | %s |\n", r.name, r.reason)
		default:
			fmt.Fprintf(w, "| %s (%.1f s) | %s | %s |\n", r.state, r.secs, r.name, r.reason)
		}
	}
	reasons := make([]string, 0, len(skips))
	for k := range skips {
		reasons = append(reasons, k)
	}
	sort.Slice(reasons, func(a, b int) bool {
		if skips[reasons[a]].n != skips[reasons[b]].n {
			return skips[reasons[a]].n > skips[reasons[b]].n
		}
		return reasons[a] < reasons[b]
	})
	for _, k := range reasons {
		ps := make([]string, 0, len(skips[k].patterns))
		for p := range skips[k].patterns {
			ps = append(ps, p)
		}
		sort.Strings(ps)
		reason := k
		if len(skips[k].tags) > 0 {
			ts := make([]string, 0, len(skips[k].tags))
			for t, n := range skips[k].tags {
				ts = append(ts, fmt.Sprintf("%s %d", t, n))
			}
			sort.Strings(ts)
			reason += " (tests with " + strings.Join(ts, ", ") + ")"
		}
		fmt.Fprintf(w, "| skipped: %d tests | %s | %s |\n", skips[k].n, strings.Join(ps, ", "), reason)
	}
	fmt.Fprintf(w, "\npassed %d, failed %d (+%d known, listed with their upstream reason), skipped %d, of %d tests of the driver\n",
		count["passed"], count["failed"], count["known"], count["skipped"], len(rs))
	return count["failed"]
}

func passed(rs []result) int {
	n := 0
	for _, r := range rs {
		if r.state == "passed" {
			n++
		}
	}
	return n
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// patternRE finds the suite's test pattern in a spec name ("[Testpattern: Dynamic PV (default fs)]").
var patternRE = regexp.MustCompile(`\[Testpattern: [^\]]+\]`)

func pattern(name string) string {
	if p := patternRE.FindString(name); p != "" {
		return strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(p, "[Testpattern: "), "]"))
	}
	return "(no pattern)"
}
