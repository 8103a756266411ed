// Command citiming writes the figures of a CI run as CONTRIBUTING.md's generated block
// ci-timing-cold or ci-timing-warm (internal/readmegen), so that no timing of the CI run is copied by hand:
//
//	CI_MARKDOWN=/tmp/ci.md .ci/run        # hack/test.sh runs this program at its end
//	go run ./hack/readme -file CONTRIBUTING.md < /tmp/ci.md
//
// hack/test.sh, hack/e2e.sh and hack/fuzz.sh append the figures to the file CI_RECORDS
// names while they run (ci_record in hack/lib.sh), one line each, tab-separated, kind first:
//
//	start  UNIX_NS  COMMIT  clean|modified  CPUS  cold|warm   hack/test.sh began (its step clock's
//	                                               zero), from empty caches or not
//	step   UNIX_NS  LABEL                          one of its steps began; it lasts until the next
//	cpu    UNIX_NS  BUSY_MS                        the machine's CPU time busy since boot (every
//	                                               core; cpu_busy_ms in lib.sh), sampled at the
//	                                               start, each step's start and the end
//	cluster-build  MS                              the background build of the cluster's components
//	fuzz   TARGETS  EACH  MS  WORKERS              hack/fuzz.sh ran (WORKERS empty: one per CPU)
//	background  NAME  MS                           another check of hack/checks.sh ran (lint,
//	                                               release-images)
//	e2e    K8S  CONTAINERD                         a hack/e2e.sh run began, within the last step
//	phase  NAME  MS  RC                            one of that run's phases
//	tests  PHASE  PASSED  FAILED  SKIPPED  SUB|-   that phase's tests (SUB: subtests passed)
//	end    UNIX_NS                                 every test passed
//
// A cold run (empty Go caches, no $GCSFUSE_CSI_CACHE: a fresh machine) writes the block
// ci-timing-cold, any other ci-timing-warm: CONTRIBUTING.md keeps one of each, since a cold run
// builds everything (the budget that CI's time limit is measured against) and a warm one
// shows the tests' own time. The block holds the commit, date and total, a table of the steps (start and duration), the
// background builds' durations (a cached cluster build takes seconds, a cold one many
// minutes), and a table of each e2e run's phases with its tests' counts.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
)

// blockPrefix is the name of CONTRIBUTING.md's blocks of this program, before "cold" or "warm".
const blockPrefix = "ci-timing-"

// cachedBelow is how long a background build of the cluster's components may take when
// everything was cached (it checks the binaries and apt, under a second here); a build that
// compiled anything takes minutes.
const cachedBelow = 30 * time.Second

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("citiming", flag.ContinueOnError)
	fs.SetOutput(stderr)
	records := fs.String("records", "", "the run's figures, as hack/test.sh's CI_RECORDS collected them")
	by := fs.String("by", "", "the command that ran, as the block's marker names it (CI_MARKDOWN=FILE .ci/run)")
	markdown := fs.String("markdown", "", "write the block to this file (go run ./hack/readme -file CONTRIBUTING.md < FILE)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *records == "" || *by == "" || *markdown == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "citiming: want -records FILE -by COMMAND -markdown FILE")
		return 2
	}
	if err := write(*records, *by, *markdown); err != nil {
		fmt.Fprintln(stderr, "citiming:", err)
		return 1
	}
	return 0
}

func write(records, by, markdown string) error {
	f, err := os.Open(records)
	if err != nil {
		return err
	}
	rep, err := parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", records, err)
	}
	b, err := readmegen.New(rep.blockName(), by, rep.markdown())
	if err != nil {
		return err
	}
	out, err := os.Create(markdown)
	if err != nil {
		return err
	}
	if err := readmegen.Write(out, b); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// report is one run's figures.
type report struct {
	start, end int64 // unix ns
	commit     string
	modified   bool // the work tree differed from the commit
	cold       bool // the run began with empty caches (hack/test.sh's cache_state)
	cpus       int
	steps      []step
	cpu        []cpuSample // in time order
	cpuBad     bool        // a cpu record could not be read: no cores-busy figures
	// clusterBuild is the background build of the cluster's components, from its start to
	// its end; 0 when not recorded.
	clusterBuild time.Duration
	fuzz         *fuzzRun
	others       []background // hack/checks.sh's other checks, in the order they ran
	e2e          []*e2eRun
}

// cpuSample is the machine's busy CPU time since boot at a moment.
type cpuSample struct {
	at   int64 // unix ns
	busy time.Duration
}

type step struct {
	at    int64 // unix ns
	label string
	runs  []int // the e2e runs within it, 1-based
}

// background is one of hack/checks.sh's checks besides fuzzing, which run beside the first
// e2e run.
type background struct {
	name string
	took time.Duration
}

// backgroundWhat says what each background record's check is.
var backgroundWhat = map[string]string{
	"lint":           "`hack/lint.sh` (go vet, staticcheck, deadcode)",
	"release-images": "`TestReleasePush` (release images for amd64 and arm64, pushed and pulled back)",
}

type fuzzRun struct {
	targets       int
	each, workers string
	took          time.Duration
}

type e2eRun struct {
	k8s, containerd string
	phases          []phase
	tests           map[string]counts // by phase
}

type phase struct {
	name string
	took time.Duration
	rc   int
}

type counts struct {
	passed, failed, skipped int
	subPassed               int // -1: the phase has no subtests
}

// fieldsOf is how many fields each kind of record has, its kind included.
var fieldsOf = map[string]int{
	"start": 6, "step": 3, "cpu": 3, "cluster-build": 2, "fuzz": 5, "background": 3, "e2e": 3, "phase": 4, "tests": 6, "end": 2,
}

// parse reads the records of one run: every line well formed, a start before anything else,
// an end last, steps in time order.
func parse(r io.Reader) (*report, error) {
	rep := &report{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		want, ok := fieldsOf[f[0]]
		if !ok {
			return nil, fmt.Errorf("line %d: unknown record %q", n, f[0])
		}
		if len(f) != want {
			return nil, fmt.Errorf("line %d: %s record with %d fields, want %d: %q", n, f[0], len(f), want, line)
		}
		if err := rep.add(f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case rep.start == 0:
		return nil, errors.New("no start record")
	case rep.end == 0:
		return nil, errors.New("no end record: the run did not finish")
	}
	return rep, nil
}

// add takes one record, its fields counted already.
func (rep *report) add(f []string) error {
	if f[0] != "start" && rep.start == 0 {
		return fmt.Errorf("%s record before the start record", f[0])
	}
	if rep.end != 0 {
		return fmt.Errorf("%s record after the end record", f[0])
	}
	var err error
	num := func(s string) int64 {
		v, e := strconv.ParseInt(s, 10, 64)
		if e == nil && v < 0 {
			e = errors.New("negative")
		}
		if e != nil && err == nil {
			err = fmt.Errorf("%s record: %q is not a count: %w", f[0], s, e)
		}
		return v
	}
	ms := func(s string) time.Duration { return time.Duration(num(s)) * time.Millisecond }
	last := func() *e2eRun {
		if len(rep.e2e) == 0 {
			err = fmt.Errorf("%s record outside an e2e run", f[0])
			return &e2eRun{tests: map[string]counts{}}
		}
		return rep.e2e[len(rep.e2e)-1]
	}
	switch f[0] {
	case "start":
		if rep.start != 0 {
			return errors.New("a second start record")
		}
		rep.start, rep.commit, rep.cpus = num(f[1]), f[2], int(num(f[4]))
		switch f[3] {
		case "clean":
		case "modified":
			rep.modified = true
		default:
			return fmt.Errorf("start record: work tree %q, want clean or modified", f[3])
		}
		switch f[5] {
		case "cold":
			rep.cold = true
		case "warm":
		default:
			return fmt.Errorf("start record: caches %q, want cold or warm", f[5])
		}
	case "step":
		at := num(f[1])
		if err == nil && (at < rep.start || len(rep.steps) > 0 && at < rep.steps[len(rep.steps)-1].at) {
			return fmt.Errorf("step %q begins before the one above it", f[2])
		}
		rep.steps = append(rep.steps, step{at: at, label: f[2]})
	case "cpu":
		// The figures are a reading of /proc/stat, not the run's: one that cannot be read or
		// goes backwards drops the column's figures (cpuBad), never the block.
		at, e1 := strconv.ParseInt(f[1], 10, 64)
		busy, e2 := strconv.ParseInt(f[2], 10, 64)
		n := len(rep.cpu)
		if e1 != nil || e2 != nil || busy < 0 || n > 0 && (at < rep.cpu[n-1].at || time.Duration(busy)*time.Millisecond < rep.cpu[n-1].busy) {
			rep.cpuBad = true
			break
		}
		rep.cpu = append(rep.cpu, cpuSample{at: at, busy: time.Duration(busy) * time.Millisecond})
	case "cluster-build":
		rep.clusterBuild = ms(f[1])
	case "fuzz":
		rep.fuzz = &fuzzRun{targets: int(num(f[1])), each: f[2], took: ms(f[3]), workers: f[4]}
	case "background":
		if _, ok := backgroundWhat[f[1]]; !ok {
			return fmt.Errorf("background record: unknown check %q", f[1])
		}
		rep.others = append(rep.others, background{name: f[1], took: ms(f[2])})
	case "e2e":
		rep.e2e = append(rep.e2e, &e2eRun{k8s: f[1], containerd: f[2], tests: map[string]counts{}})
		if len(rep.steps) > 0 {
			s := &rep.steps[len(rep.steps)-1]
			s.runs = append(s.runs, len(rep.e2e))
		}
	case "phase":
		r := last()
		r.phases = append(r.phases, phase{name: f[1], took: ms(f[2]), rc: int(num(f[3]))})
	case "tests":
		c := counts{passed: int(num(f[2])), failed: int(num(f[3])), skipped: int(num(f[4])), subPassed: -1}
		if f[5] != "-" {
			c.subPassed = int(num(f[5]))
		}
		last().tests[f[1]] = c
	case "end":
		rep.end = num(f[1])
		if err == nil && (rep.end < rep.start || len(rep.steps) > 0 && rep.end < rep.steps[len(rep.steps)-1].at) {
			return errors.New("the end record is before the last step")
		}
	}
	return err
}

// blockName is CONTRIBUTING.md's block for this run: ci-timing-cold or ci-timing-warm.
func (rep *report) blockName() string {
	if rep.cold {
		return blockPrefix + "cold"
	}
	return blockPrefix + "warm"
}

// seconds is d as the tables print it.
func seconds(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

func since(from, to int64) time.Duration { return time.Duration(to - from) }

// markdown is the block's content.
func (rep *report) markdown() string {
	var b strings.Builder
	total := since(rep.start, rep.end)
	commit := rep.commit
	if rep.modified {
		commit += " with uncommitted changes"
	}
	caches := "warm (caches from earlier runs)"
	if rep.cold {
		caches = "cold (empty Go caches, no `$GCSFUSE_CSI_CACHE`: a fresh machine)"
	}
	fmt.Fprintf(&b, "Commit %s, %s, %d CPUs, %s: %s s (%.1f min) from `hack/test.sh`'s start to \"all tests passed\".\n\n",
		commit, time.Unix(0, rep.start).UTC().Format(time.DateOnly), rep.cpus, caches, seconds(total), total.Minutes())

	var rows [][]string
	for i, s := range rep.steps {
		to := rep.end
		if i+1 < len(rep.steps) {
			to = rep.steps[i+1].at
		}
		label := s.label
		if len(s.runs) > 0 {
			label += " (" + runNames(s.runs) + ")"
		}
		rows = append(rows, []string{label, seconds(since(rep.start, s.at)), seconds(since(s.at, to)), rep.coresBusy(s.at, to)})
	}
	rows = append(rows, []string{"total", "", seconds(total), rep.coresBusy(rep.start, rep.end)})
	b.WriteString(readmegen.Table([]string{"step of `hack/test.sh`", "start, s", "took, s", "cores busy"}, rows...))

	if bg := rep.background(); bg != "" {
		b.WriteString("\nIn the background: " + bg + ".\n")
	}
	if len(rep.e2e) > 0 {
		b.WriteString("\n" + rep.e2eTable())
	}
	return b.String()
}

// coresBusy is how many of the machine's cores were busy on average from one moment to the
// other, as "1.93 of 2" (a step that kept them all busy gains only from less work, one that
// left them idle from more beside it), from the cpu samples of exactly those moments
// (ci_record_at stamps a step and its sample alike); "" without both.
func (rep *report) coresBusy(from, to int64) string {
	at := func(t int64) (cpuSample, bool) {
		i := slices.IndexFunc(rep.cpu, func(c cpuSample) bool { return c.at == t })
		if i < 0 {
			return cpuSample{}, false
		}
		return rep.cpu[i], true
	}
	if rep.cpuBad {
		return ""
	}
	a, ok := at(from)
	z, ok2 := at(to)
	if !ok || !ok2 || z.at <= a.at {
		return ""
	}
	return fmt.Sprintf("%.2f of %d", (z.busy-a.busy).Seconds()/time.Duration(z.at-a.at).Seconds(), rep.cpus)
}

// runNames is "run 1" or "runs 1, 2".
func runNames(runs []int) string {
	var s []string
	for _, r := range runs {
		s = append(s, strconv.Itoa(r))
	}
	if len(s) == 1 {
		return "run " + s[0]
	}
	return "runs " + strings.Join(s, ", ")
}

// background is the sentence on what ran beside the steps, or "".
func (rep *report) background() string {
	var parts []string
	if d := rep.clusterBuild; d > 0 {
		state := "everything cached"
		if d >= cachedBelow {
			state = "built, not all cached"
		}
		parts = append(parts, fmt.Sprintf("the cluster's components (`hack/cluster-deps.sh`, `hack/k8s-build.sh`) %s s, %s", seconds(d), state))
	}
	if f := rep.fuzz; f != nil {
		workers := "one worker per CPU"
		switch f.workers {
		case "":
		case "1":
			workers = "one worker"
		default:
			workers = f.workers + " workers"
		}
		parts = append(parts, fmt.Sprintf("the fuzz stage (`hack/fuzz.sh`: %d targets, %s each, %s) %s s", f.targets, f.each, workers, seconds(f.took)))
	}
	for _, o := range rep.others {
		parts = append(parts, fmt.Sprintf("%s %s s", backgroundWhat[o.name], seconds(o.took)))
	}
	return strings.Join(parts, "; ")
}

// e2eTable has a column per e2e run and a row per phase, in the order they ran (a phase only
// some runs have, such as previous-release, where those runs have it), each phase with tests
// followed by their counts.
func (rep *report) e2eTable() string {
	var order []string
	for _, r := range rep.e2e {
		at := -1
		for _, p := range r.phases {
			if i := slices.Index(order, p.name); i >= 0 {
				at = i
				continue
			}
			at++
			order = slices.Insert(order, at, p.name)
		}
	}
	header := []string{"e2e phase, s"}
	cluster := []string{"Kubernetes, containerd"}
	for i, r := range rep.e2e {
		header = append(header, fmt.Sprintf("run %d", i+1))
		cluster = append(cluster, r.k8s+", "+r.containerd)
	}
	rows := [][]string{cluster}
	sums := make([]time.Duration, len(rep.e2e))
	for _, name := range order {
		row := []string{name}
		var tests []string
		for i, r := range rep.e2e {
			cell := ""
			for _, p := range r.phases {
				if p.name != name {
					continue
				}
				cell = seconds(p.took)
				if p.rc != 0 {
					cell += fmt.Sprintf(" (rc=%d)", p.rc)
				}
				sums[i] += p.took
			}
			row = append(row, cell)
			if c, ok := r.tests[name]; ok {
				tests = append(tests, c.String())
			} else {
				tests = append(tests, "")
			}
		}
		rows = append(rows, row)
		if slices.ContainsFunc(tests, func(s string) bool { return s != "" }) {
			rows = append(rows, append([]string{name + ": tests"}, tests...))
		}
	}
	sum := []string{"all phases"}
	for _, d := range sums {
		sum = append(sum, seconds(d))
	}
	return readmegen.Table(header, append(rows, sum)...)
}

// String is "44 of 46 passed, 2 skipped (95 subtests passed)": of the top-level tests.
func (c counts) String() string {
	s := fmt.Sprintf("%d of %d passed", c.passed, c.passed+c.failed+c.skipped)
	if c.failed > 0 {
		s += fmt.Sprintf(", %d failed", c.failed)
	}
	if c.skipped > 0 {
		s += fmt.Sprintf(", %d skipped", c.skipped)
	}
	if c.subPassed >= 0 {
		s += fmt.Sprintf(" (%d subtests passed)", c.subPassed)
	}
	return s
}
