package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
)

// runner runs suites' test binaries against mounts.
type runner struct {
	// bins holds <package>.test and upstream's test_config.yaml (hack/gcsfuse-itests.sh
	// builds them).
	bins      string
	test2json string
	// emulatorURL is the storage API's base URL (http://host:port), the tests'
	// STORAGE_EMULATOR_HOST.
	emulatorURL string
	cp          *controlPlane
	// work holds each suite's logs and temporary files.
	work string
	// keep keeps each suite's temporary files (the tests write their local copies of large
	// files there).
	keep bool
	log  io.Writer
}

// hardKillAfter is how long past its -test.timeout a binary may run before it is killed
// (its own timeout panics and prints the running tests first).
const hardKillAfter = time.Minute

// suiteDir is the suite's directory under work.
func (r *runner) suiteDir(s Suite) string {
	return filepath.Join(r.work, strings.ReplaceAll(s.Name, "/", "-"))
}

// freshSuiteDir empties the suite's directory for a new run (its logs of the last one go),
// refusing when something is mounted below it: removing through a mount deletes the bucket's
// objects, or fails on a dead one.
func (r *runner) freshSuiteDir(s Suite) error {
	sdir := r.suiteDir(s)
	left, err := fusemount.MountsUnder(sdir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("mounts left under %s by an earlier run: %v (unmount them)", sdir, left)
	}
	if err := os.RemoveAll(sdir); err != nil {
		return err
	}
	return os.MkdirAll(sdir, 0o755)
}

// run runs the suite's binary against dir, a mount of bucket made with the suite's options,
// and returns its results. The binary's output is kept in the suite directory (test.log,
// and test2json's events in test.json). The caller sets Seconds, which includes its mount.
func (r *runner) run(ctx context.Context, s Suite, dir, bucket string) SuiteReport {
	rep := SuiteReport{Suite: s.Name, Package: s.Package, Options: s.MountOptions(), Dir: dir, Bucket: bucket}
	if s.Skip != "" {
		rep.Excluded = []Exclusion{{Pattern: s.Skip, Why: s.SkipWhy}}
	}
	sdir := r.suiteDir(s)
	tmp := filepath.Join(sdir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return failed(rep, err.Error())
	}
	if !r.keep {
		defer os.RemoveAll(tmp)
	}
	for _, c := range s.Needs {
		if _, err := exec.LookPath(c); err != nil {
			return failed(rep, fmt.Sprintf("its tests run %s, which this host lacks: %v", c, err))
		}
	}
	bin := filepath.Join(r.bins, s.Package+".test")
	if _, err := os.Stat(bin); err != nil {
		return failed(rep, fmt.Sprintf("no test binary: %v (hack/gcsfuse-itests.sh build makes them)", err))
	}
	args := []string{
		"-test.v=test2json", "-test.count=1", "-test.timeout=" + s.Timeout.String(),
		"--integrationTest", "--mountedDirectory=" + dir, "--testbucket=" + bucket,
		"--config-file=" + filepath.Join(r.bins, "test_config.yaml"),
	}
	if s.Run != "" {
		args = append(args, "-test.run="+s.Run)
	}
	if s.Skip != "" {
		args = append(args, "-test.skip="+s.Skip)
	}
	u, err := url.Parse(r.emulatorURL)
	if err != nil {
		return failed(rep, fmt.Sprintf("emulator URL %q: %v", r.emulatorURL, err))
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + tmp, "TMPDIR=" + tmp,
		// As upstream runs them (run_tests_mounted_directory.sh).
		"GODEBUG=asyncpreemptoff=1",
		"STORAGE_EMULATOR_HOST=" + r.emulatorURL,
		// test_config.yaml's ${...}; the flags above say the same.
		"MOUNTED_DIR=" + dir, "BUCKET_NAME=" + bucket, "ONLY_DIR=",
	}
	env = append(env, r.cp.env(u.Hostname())...)

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.Timeout+hardKillAfter)
	defer cancel()
	// The output goes to test2json once the binary is done, and as it comes to test.log for
	// whoever watches.
	logFile, err := os.Create(filepath.Join(sdir, "test.log"))
	if err != nil {
		return failed(rep, err.Error())
	}
	defer logFile.Close()
	var out bytes.Buffer
	w := io.MultiWriter(&out, unframer{logFile})
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = tmp, env, w, w
	// Its own group, so that whatever it started goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(r.log, "=== %s: %s %s\n", s.Name, filepath.Base(bin), strings.Join(args, " "))
	runErr := cmd.Run()
	r.cp.refusedTargets() // what earlier suites left
	raw := out.Bytes()
	conv := exec.Command(r.test2json, "-t", "-p", s.Name)
	conv.Stdin = bytes.NewReader(raw)
	events, err := conv.Output()
	if err != nil {
		return failed(rep, fmt.Sprintf("test2json: %v", err))
	}
	_ = os.WriteFile(filepath.Join(sdir, "test.json"), events, 0o644)
	tests, pkgAction, pkgOut, err := parseTest2JSON(bytes.NewReader(events))
	if err != nil {
		return failed(rep, fmt.Sprintf("reading test2json's events: %v", err))
	}
	rep.Tests = tests
	rep.Refused = r.cp.refusedTargets()
	anyFailed := false
	for _, t := range tests {
		anyFailed = anyFailed || t.Action == "fail"
	}
	switch {
	case parent.Err() != nil:
		rep.Error = "interrupted"
	case ctx.Err() != nil:
		rep.Error = fmt.Sprintf("killed %s after its -test.timeout of %s", hardKillAfter, s.Timeout)
	case runErr != nil && !isExit(runErr):
		rep.Error = fmt.Sprintf("running the binary: %v", runErr)
	}
	// A failure no test carries (TestMain exited, a crash): the pseudo-test holds it, so
	// that compare sees it.
	if (runErr != nil || pkgAction == "fail") && !anyFailed {
		rep.Tests = append(rep.Tests, TestResult{Name: packageTest, Action: "fail", Reason: packageFailure(pkgOut)})
	}
	if len(tests) == 0 && runErr == nil {
		// A binary that ran nothing proves nothing: a -test.run that matches no test, say.
		rep.Tests = append(rep.Tests, TestResult{Name: packageTest, Action: "fail", Reason: "no test ran (-test.run " + s.Run + ")"})
	}
	return rep
}

// unframer drops the marks -test.v=test2json puts in the output (^V before each of the
// testing package's lines, ^O and ^N around error lines): the human log goes without.
type unframer struct{ w io.Writer }

func (u unframer) Write(b []byte) (int, error) {
	clean := bytes.Map(func(r rune) rune {
		if r == 0x16 || r == 0x0e || r == 0x0f {
			return -1
		}
		return r
	}, b)
	if _, err := u.w.Write(clean); err != nil {
		return 0, err
	}
	return len(b), nil
}

func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// failed records a suite that could not run as a failure of its pseudo-test.
func failed(rep SuiteReport, why string) SuiteReport {
	rep.Error = why
	rep.Tests = append(rep.Tests, TestResult{Name: packageTest, Action: "fail", Reason: why})
	return rep
}
