package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The reference: a standalone run of the default suites, kept in the repository per gcsfuse
// version (testdata/reference-v<version>.json, written by `reference`), so that CI compares
// a cluster run with it instead of running every suite standalone again (~8 min of CPU, on
// a 2-core machine that CI's cold run keeps busy). A standalone run depends only on the
// pinned gcsfuse, its tests, the suites and the emulator; what can drift (the emulator, the
// machine's load) is settled by running standalone again the suites whose tests passed in
// the reference and failed through a pod (suspects), never by the reference alone: a test
// fails CI only if it passes a fresh standalone run and fails through a pod twice.

// referenceFile is the reference's path for a gcsfuse version, under dir (the runner's
// testdata directory).
func referenceFile(dir, version string) string {
	return filepath.Join(dir, "reference-v"+version+".json")
}

// trimReference keeps what judging needs: suites, options and each test's outcome and
// reason; not where and when it ran (directories, buckets, seconds), which would change the
// file at every refresh.
func trimReference(r *Report) *Report {
	out := &Report{Mode: r.Mode}
	for _, s := range r.Suites {
		s.Dir, s.Bucket, s.Seconds = "", "", 0
		s.Tests = slices.Clone(s.Tests)
		for i := range s.Tests {
			s.Tests[i].Seconds = 0
		}
		out.Suites = append(out.Suites, s)
	}
	return out
}

// suspects are the suites of mounted with a test that the reference passed and mounted did
// not (a driver bug if a fresh standalone run passes it too), or that the reference does
// not know: those a fresh standalone run has to judge. In mounted's order, each once.
func suspects(ref, mounted *Report) []string {
	known := map[string]bool{}
	for _, s := range ref.Suites {
		known[s.Suite] = true
	}
	var out []string
	for _, v := range classify(ref, mounted) {
		if (v.Class == DriverBug || (v.Class == NewMounted && !known[v.Suite])) && !slices.Contains(out, v.Suite) {
			out = append(out, v.Suite)
		}
	}
	return out
}

// readStandalone reads a standalone run's results (a reference is one).
func readStandalone(path string) (*Report, error) {
	r, err := readReport(path)
	if err == nil && r.Mode != "standalone" {
		err = fmt.Errorf("%s is a %s run, not a standalone one", path, r.Mode)
	}
	return r, err
}

// notRun are the reference's suites that mounted has no results for, but for those left
// out of it on purpose (hack/gcsfuse-itests.sh's CLUSTER_EXCLUDE).
func notRun(ref, mounted *Report, leftOut ...string) []string {
	ran := map[string]bool{}
	for _, s := range mounted.Suites {
		ran[s.Suite] = true
	}
	for _, s := range leftOut {
		ran[s] = true
	}
	var out []string
	for _, s := range ref.Suites {
		if !ran[s.Suite] {
			out = append(out, s.Suite)
		}
	}
	return out
}

// onlySuitesOf is mounted without the suites ref did not run.
func onlySuitesOf(ref, mounted *Report) *Report {
	ran := map[string]bool{}
	for _, s := range ref.Suites {
		ran[s.Suite] = true
	}
	out := &Report{Mode: mounted.Mode}
	for _, s := range mounted.Suites {
		if ran[s.Suite] {
			out.Suites = append(out.Suites, s)
		}
	}
	return out
}

// referenceCmd: `reference STANDALONE.json OUT.json` writes a standalone run of every
// default suite, trimmed, as the reference; `suspects REFERENCE.json MOUNTED.json` prints
// the suites to run standalone again, one per line.
func referenceCmd(cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	leftOut := fs.String("left-out", "", "suspects: suites the mounted run left out on purpose, space separated (not a missing result)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	args = fs.Args()
	if len(args) != 2 || (cmd != "suspects" && *leftOut != "") {
		fmt.Fprintf(os.Stderr, "usage: gcsfuse-itests reference STANDALONE.json OUT.json | suspects [-left-out SUITES] REFERENCE.json MOUNTED.json\n")
		return 2
	}
	ref, err := readStandalone(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if cmd == "suspects" {
		mounted, err := readReport(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if missing := notRun(ref, mounted, strings.Fields(*leftOut)...); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "%s has no results for %v of the reference: the mounted run did not run them\n", args[1], missing)
			return 1
		}
		for _, s := range suspects(ref, mounted) {
			fmt.Println(s)
		}
		return 0
	}
	if missing := missingSuites(ref); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "%s lacks default suites %v: run every one standalone for a reference\n", args[0], missing)
		return 1
	}
	if err := writeReport(args[1], trimReference(ref)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// missingSuites are the default suites r has no results for, or whose run itself failed (no
// mount, a crashed binary): a reference must judge every test of every one.
func missingSuites(r *Report) []string {
	var missing []string
	for _, s := range defaultSuites() {
		i := slices.IndexFunc(r.Suites, func(x SuiteReport) bool { return x.Suite == s.Name })
		if i < 0 || r.Suites[i].Error != "" {
			missing = append(missing, s.Name)
		}
	}
	return missing
}
