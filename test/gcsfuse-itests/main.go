// Command gcsfuse-itests runs gcsfuse's own integration tests (tools/integration_tests of
// the pinned gcsfuse module, unmodified, in their --mountedDirectory mode) against mounts
// backed by the project's GCS emulator, so that the driver is judged by gcsfuse's own
// expectations: the same tests against a standalone gcsfuse mount and against the driver's
// mount tell the emulator's gaps (failing both) from the driver's bugs (failing only through
// the driver). hack/gcsfuse-itests.sh builds the test binaries and this command, and is the
// way to run it:
//
//	gcsfuse-itests list                     # the suites: package, mount options, -test.run
//	gcsfuse-itests flags PKG|SUITE...       # each suite's mountOptions, for the caller's volume
//	gcsfuse-itests standalone -bin DIR -gcsfuse BIN -work DIR -out FILE [SUITE...]
//	gcsfuse-itests driver -bin DIR -sidecar BIN -work DIR -out FILE [SUITE...]
//	gcsfuse-itests mounted -bin DIR -emulator URL -suite S -dir D -bucket B -work DIR -out FILE
//	gcsfuse-itests compare STANDALONE.json MOUNTED.json   # exit 1 on a driver bug
//	gcsfuse-itests reference STANDALONE.json OUT.json     # a full standalone run as the reference
//	gcsfuse-itests suspects REFERENCE.json MOUNTED.json   # the suites to run standalone again
//	gcsfuse-itests merge OUT.json IN.json...              # runs of one mode into one file
//
// standalone mounts gcsfuse itself, driver mounts through this driver's node plugin and
// sidecar without a cluster (test/internal/testenv); both start the emulator in process
// with a bucket per suite. mounted runs one suite against a mount the caller made (a pod's
// volume, from the host), so a caller mounts, runs and unmounts suite by suite. Every mode
// merges the suites it ran into -out (a suite run again replaces its earlier results). The
// tests also need Google's Storage Control API and credentials (controlplane.go says how
// they get them). docs/gcsfuse-itests.md has the suites, what is left out and why, and the
// results here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
)

func main() { os.Exit(run(os.Args[1:])) }

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: gcsfuse-itests list | packages | flags [-gcsfuse] PKG|SUITE... | standalone | driver | mounted | compare STANDALONE.json MOUNTED.json | reference STANDALONE.json OUT.json | suspects REFERENCE.json MOUNTED.json | merge OUT.json IN.json... (-h after a mode for its flags)")
	return 2
}

func run(args []string) int {
	if len(args) == 0 {
		return usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd, args := args[0], args[1:]
	switch cmd {
	case "list":
		return list()
	case "packages":
		fmt.Println(strings.Join(packages(), " "))
		return 0
	case "flags":
		return flagsCmd(args)
	case "standalone", "driver", "mounted":
		return runMode(ctx, cmd, args)
	case "compare":
		return compareCmd(args)
	case "reference", "suspects":
		return referenceCmd(cmd, args)
	case "merge":
		return mergeCmd(args)
	}
	return usage()
}

func list() int {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SUITE\tPACKAGE\tMOUNT OPTIONS\t-test.run\t-test.skip\tTIMEOUT\tDEFAULT")
	for _, s := range suites {
		def := "yes"
		if s.Optional != "" {
			def = "no"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Package, s.MountOptions(), dash(s.Run), dash(s.Skip), s.Timeout, def)
	}
	_ = w.Flush()
	fmt.Println()
	for _, s := range suites {
		if s.Skip != "" {
			fmt.Printf("%s leaves out %s: %s\n", s.Name, s.Skip, s.SkipWhy)
		}
		if s.Optional != "" {
			fmt.Printf("%s is not in the default set: %s\n", s.Name, s.Optional)
		}
	}
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// flagsCmd prints, per suite of the packages (or suites) named, "SUITE<TAB>OPTIONS": the
// driver's mountOptions for the volume the mounted mode runs that suite against (ro: a
// read-only volume); with -gcsfuse, gcsfuse's command-line flags instead.
func flagsCmd(args []string) int {
	fs := flag.NewFlagSet("flags", flag.ContinueOnError)
	cli := fs.Bool("gcsfuse", false, "print gcsfuse's command-line flags instead of the driver's mountOptions")
	if fs.Parse(args) != nil {
		return 2
	}
	ss, err := selectSuites(fs.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, s := range ss {
		if *cli {
			fmt.Printf("%s\t%s\n", s.Name, strings.Join(s.GcsfuseArgs(), " "))
		} else {
			fmt.Printf("%s\t%s\n", s.Name, s.MountOptions())
		}
	}
	return 0
}

func runMode(ctx context.Context, mode string, args []string) int {
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	bins := fs.String("bin", "", "directory of the test binaries (<package>.test) and test_config.yaml")
	work := fs.String("work", "", "directory for logs and the tests' temporary files (one subdirectory per suite)")
	out := fs.String("out", "", "results file (JSON): the suites run merge into it (a suite run again replaces its results)")
	t2j := fs.String("test2json", "", "test2json binary (default: go tool -n test2json)")
	keep := fs.Bool("keep", false, "keep the tests' temporary files")
	credFile := fs.String("credentials", "", "service account key for the tests' storage client (default: one of its own, whose token the emulator ignores; give one of emulatorauth's for buckets with a policy)")
	gcsfuse := fs.String("gcsfuse", "", "standalone: the gcsfuse binary")
	sidecar := fs.String("sidecar", "", "driver: the gcsfuse-sidecar binary")
	emulatorURL := fs.String("emulator", "", "mounted: the emulator's base URL as this host reaches it (http://HOST:PORT)")
	suite := fs.String("suite", "", "mounted: the suite (see list)")
	dir := fs.String("dir", "", "mounted: the mount to test (a pod volume's host path)")
	bucket := fs.String("bucket", "", "mounted: the mount's bucket")
	if fs.Parse(args) != nil {
		return 2
	}
	need := map[string]string{"-bin": *bins, "-work": *work, "-out": *out}
	switch mode {
	case "standalone":
		need["-gcsfuse"] = *gcsfuse
	case "driver":
		need["-sidecar"] = *sidecar
	case "mounted":
		need["-emulator"], need["-suite"], need["-dir"], need["-bucket"] = *emulatorURL, *suite, *dir, *bucket
	}
	for f, v := range need {
		if v == "" {
			fmt.Fprintf(os.Stderr, "%s needs %s\n", mode, f)
			return 2
		}
	}
	names := fs.Args()
	if mode == "mounted" {
		names = []string{*suite}
	}
	ss, err := selectSuites(names)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if mode == "mounted" && len(ss) != 1 {
		fmt.Fprintf(os.Stderr, "%s has %d suites; name one of them\n", *suite, len(ss))
		return 2
	}
	if *t2j == "" {
		if *t2j, err = defaultTest2JSON(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cp, err := startControlPlane(*work, *credFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		return 1
	}
	defer cp.close()
	// The results file keeps the suites run before in the same mode: a suite run again
	// replaces its earlier results (remove the file to start afresh).
	rep := &Report{Mode: mode}
	if old, err := readReport(*out); err == nil && old.Mode == mode {
		rep = old
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r := &runner{bins: *bins, test2json: *t2j, cp: cp, work: *work, keep: *keep, log: os.Stdout}
	var ran *Report
	switch mode {
	case "standalone":
		ran, err = standalone(ctx, r, *gcsfuse, ss)
	case "driver":
		ran, err = driver(ctx, r, *sidecar, ss)
	case "mounted":
		r.emulatorURL = strings.TrimRight(*emulatorURL, "/")
		ran = &Report{Mode: mode, Suites: []SuiteReport{mounted(ctx, r, ss[0], *dir, *bucket)}}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, s := range ran.Suites {
		rep.merge(s)
	}
	if err := writeReport(*out, rep); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println()
	rep.table(os.Stdout)
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

func defaultTest2JSON() (string, error) {
	// The toolchain builds test2json on demand; -n prints where it put it.
	b, err := exec.Command("go", "tool", "-n", "test2json").Output()
	if err != nil {
		return "", fmt.Errorf("go tool -n test2json (give -test2json): %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// compareCmd classifies each test of a mounted (or driver) run against a standalone one;
// exit 1 when a test passed standalone and failed through the driver.
//
// With -only-reference-suites, the mounted run's suites that the standalone one did not run
// are left out (a standalone run of some suites only: compare-cluster's suspects).
func compareCmd(args []string) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	onlyRef := fs.Bool("only-reference-suites", false, "judge only the suites the standalone run ran")
	if fs.Parse(args) != nil {
		return 2
	}
	args = fs.Args()
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gcsfuse-itests compare [-only-reference-suites] STANDALONE.json MOUNTED.json")
		return 2
	}
	ref, err := readStandalone(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	got, err := readReport(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *onlyRef {
		// A suite the standalone run could not run (no mount, a crashed binary) judges
		// nothing: its failures through the driver must not pass as "not in the standalone
		// run".
		for _, s := range ref.Suites {
			if s.Error != "" {
				fmt.Fprintf(os.Stderr, "%s: suite %s did not run standalone (%s): it cannot judge the mounted run\n", args[0], s.Suite, s.Error)
				return 1
			}
		}
		got = onlySuitesOf(ref, got)
	}
	if printVerdicts(os.Stdout, classify(ref, got)) > 0 {
		return 1
	}
	return 0
}

// mergeCmd merges the suites of runs of one mode into OUT (made when missing; a suite in
// several replaced by the last): runs made side by side, each into a file of its own.
func mergeCmd(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gcsfuse-itests merge OUT.json IN.json...")
		return 2
	}
	out, err := readReport(args[0])
	if errors.Is(err, os.ErrNotExist) {
		out, err = nil, nil
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, in := range args[1:] {
		r, err := readReport(in)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if out == nil {
			out = &Report{Mode: r.Mode}
		}
		if r.Mode != out.Mode {
			fmt.Fprintf(os.Stderr, "%s is a %s run, %s a %s one: not merged\n", in, r.Mode, args[0], out.Mode)
			return 1
		}
		for _, s := range r.Suites {
			out.merge(s)
		}
	}
	if err := writeReport(args[0], out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
