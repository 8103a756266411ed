package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
)

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// build builds nodeinit once for the test binary.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeinit-test-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "nodeinit")
		// Static and -trimpath, as hack/cluster-lib.sh builds it (hack/lib.sh's flags).
		cmd := exec.Command("go", "build", "-trimpath", "-o", built, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build nodeinit: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// node is a nodeinit started as hack/cluster-up.sh starts it, in namespaces of its own.
type node struct {
	unshare *exec.Cmd
	initPID int // on this machine
	log     *syncbuf.Buffer
	done    chan error
	ended   bool // done received
}

// startNode builds nodeinit and starts it under unshare, as cluster-up.sh does, with
// nodeinit's flags extra after its hostname and grace.
func startNode(t *testing.T, grace time.Duration, extra ...string) *node {
	t.Helper()
	needs.Root(t)
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (util-linux) is needed to start a node: %v", tool, err)
		}
	}
	bin := build(t)
	n := &node{log: &syncbuf.Buffer{}, done: make(chan error, 1)}
	n.unshare = exec.Command("unshare", "--pid", "--mount", "--uts", "--ipc", "--fork", "--kill-child", "--mount-proc",
		"--propagation", "unchanged", "--", bin, "-hostname", "testnode", "-grace", grace.String())
	n.unshare.Args = append(n.unshare.Args, extra...)
	n.unshare.Stdout, n.unshare.Stderr = n.log, n.log
	// A test binary killed by its timeout takes the node with it (unshare --kill-child).
	n.unshare.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.unshare.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.done <- n.unshare.Wait() }()
	t.Cleanup(func() {
		if !n.ended {
			_ = n.unshare.Process.Kill()
			<-n.done
		}
	})
	children := filepath.Join("/proc", strconv.Itoa(n.unshare.Process.Pid), "task", strconv.Itoa(n.unshare.Process.Pid), "children")
	waitfor.Until(t, 5*time.Second, "nodeinit to start", func() bool {
		b, _ := os.ReadFile(children)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return false
		}
		n.initPID = pid
		return strings.Contains(n.log.String(), "node up")
	})
	return n
}

// in runs a shell command inside the node, as `node_exec` does.
func (n *node) in(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.initPID), "-a", "--", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("in the node: %s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// exit waits for the node to end and returns unshare's exit code (nodeinit's).
func (n *node) exit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-n.done:
		n.ended = true
		return n.unshare.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the node did not end within %s; its log:\n%s", within, n.log)
		return -1
	}
}

// TestNodeIsAMachineOfItsOwn: inside the node, PID 1 is nodeinit, the hostname is the
// node's, and a privileged pod's way into the node's mounts (the storage testsuites'
// hostexec pods: nsenter --mount=/proc/1/ns/mnt) works, which this machine's own PID 1
// refuses.
func TestNodeIsAMachineOfItsOwn(t *testing.T) {
	n := startNode(t, 5*time.Second)
	if got := n.in(t, "cat /proc/1/comm"); got != "nodeinit" {
		t.Errorf("PID 1 in the node is %q, want nodeinit", got)
	}
	if got := n.in(t, "hostname"); got != "testnode" {
		t.Errorf("hostname in the node is %q, want testnode", got)
	}
	if got := n.in(t, "nsenter --mount=/proc/1/ns/mnt -- echo entered"); got != "entered" {
		t.Errorf("nsenter into PID 1's mount namespace from the node: %q", got)
	}
}

// TestOrphansAreReaped: a process whose parent ended is re-parented to the init, which
// must collect it when it ends (containerd's shims, units started from the host), or the
// node fills with zombies.
func TestOrphansAreReaped(t *testing.T) {
	n := startNode(t, 5*time.Second)
	// The subshell's sleep outlives its parent (nsenter's sh), then ends.
	n.in(t, "(sleep 0.3 &) ; true")
	waitfor.Until(t, 5*time.Second, "the orphan to end and be reaped", func() bool {
		// Each process of the node, "pid (comm) state ...": an orphan not reaped stays, a zombie.
		for _, line := range strings.Split(n.in(t, "cat /proc/[0-9]*/stat 2>/dev/null || true"), "\n") {
			if strings.Contains(line, "(sleep)") {
				return false
			}
		}
		return true
	})
}

// startUnit starts a shell loop in the node that traps SIGTERM (trap: its command) and
// returns once the trap is set. fromHost starts it as cluster-lib.sh's node_start does: the
// child of an nsenter on this machine, which the init cannot wait for; otherwise it is
// started from inside the node, orphaned to the init.
func (n *node) startUnit(t *testing.T, fromHost bool, trap string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	loop := "trap '" + trap + "' TERM; touch " + ready + "; while :; do sleep 0.05; done"
	if fromHost {
		cmd := exec.Command("nsenter", "-t", strconv.Itoa(n.initPID), "-a", "--", "sh", "-c", loop)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // nsenter; the unit ends with the node
			<-waited
		})
	} else {
		n.in(t, "setsid sh -c \""+loop+"\" </dev/null >/dev/null 2>&1 &")
	}
	waitfor.Until(t, 5*time.Second, "the unit to set its trap", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
}

// TestStopEndsEveryProcessOfTheNode: SIGTERM to the init stops the node: each process gets
// SIGTERM and its time to end, those the host started (node_start: nsenter's children there)
// as well as the init's own, and the init exits only once they have (0); one that ignores
// SIGTERM is killed past the grace period (exit 1, said in the log).
func TestStopEndsEveryProcessOfTheNode(t *testing.T) {
	// unitTakes is how long a unit takes to end after SIGTERM (a kubelet flushing its state).
	const unitTakes = 500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		fromHost bool
		ignore   bool
		wantCode int
	}{
		{name: "a unit started from the host gets its time", fromHost: true, wantCode: 0},
		{name: "a unit orphaned in the node gets its time", wantCode: 0},
		{name: "a unit ignoring SIGTERM is killed past the grace", fromHost: true, ignore: true, wantCode: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grace := 10 * time.Second
			if tc.ignore {
				grace = time.Second
			}
			n := startNode(t, grace)
			mark := filepath.Join(t.TempDir(), "terminated")
			trap := "sleep " + strconv.FormatFloat(unitTakes.Seconds(), 'f', 1, 64) + "; echo term > " + mark + "; exit 0"
			if tc.ignore {
				trap = "echo term > " + mark
			}
			n.startUnit(t, tc.fromHost, trap)
			start := time.Now()
			if err := syscall.Kill(n.initPID, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := n.exit(t, grace+10*time.Second)
			took := time.Since(start)
			if code != tc.wantCode {
				t.Errorf("nodeinit exited %d, want %d; its log:\n%s", code, tc.wantCode, n.log)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Errorf("the unit did not end by its SIGTERM trap before the node ended (%s after SIGTERM): %v", took, err)
			}
			if !tc.ignore && took < unitTakes {
				t.Errorf("the node ended %s after SIGTERM, before its unit's %s", took, unitTakes)
			}
			if tc.ignore {
				if took < grace {
					t.Errorf("the node ended %s after SIGTERM, before its %s grace", took, grace)
				}
				if !strings.Contains(n.log.String(), "killed") {
					t.Errorf("the log does not say a process was killed:\n%s", n.log)
				}
			}
		})
	}
}

// TestOtherSignalsLeaveTheNodeUp: a PID 1 ignores what it has no use for; SIGHUP, SIGUSR1 or
// SIGQUIT (Go's default: end the program) must not power the node off.
func TestOtherSignalsLeaveTheNodeUp(t *testing.T) {
	n := startNode(t, 5*time.Second)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT, syscall.SIGALRM, syscall.SIGPIPE} {
		if err := syscall.Kill(n.initPID, sig); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-n.done:
		n.ended = true
		t.Fatalf("the node ended on a signal it should ignore; its log:\n%s", n.log)
	case <-time.After(500 * time.Millisecond):
	}
	if got := n.in(t, "cat /proc/1/comm"); got != "nodeinit" {
		t.Errorf("PID 1 in the node is %q after the signals", got)
	}
}

// TestAFilesystemOfItsOwn: a second node (-private, -bind, -tmpfs) sees its own directory
// where this machine has another, shared inside the node as the kubelet needs, and what it
// mounts there stays in it: this machine (and the first node, which shares its mounts)
// sees none of it, neither on the directory the node was given nor on the one it hides.
func TestAFilesystemOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	src, dst, run := filepath.Join(dir, "node2-kubelet"), filepath.Join(dir, "kubelet"), filepath.Join(dir, "run")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "which"), []byte("node2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "which"), []byte("this machine"), 0o644); err != nil {
		t.Fatal(err)
	}
	// As cluster-up.sh leaves the first node's directories on a host whose / is private: a
	// shared mount, which the first node's copy is a peer of.
	for _, args := range [][]string{{"--bind", dst, dst}, {"--make-shared", dst}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-R", dst).Run() })
	n := startNode(t, 5*time.Second, "-private", "-bind", src+":"+dst, "-tmpfs", run)
	if got := n.in(t, "cat "+dst+"/which"); got != "node2" {
		t.Errorf("the node reads %q in %s, want its own directory's node2", got, dst)
	}
	// One mount each, shared: containerd reads the first of a mount point's entries, and
	// refuses a Bidirectional volume on one that is not shared.
	for _, d := range []string{dst, run} {
		if got := n.in(t, "findmnt -n -o PROPAGATION --mountpoint "+d); got != "shared" {
			t.Errorf("%s in the node is %q, want one mount, shared (the kubelet's Bidirectional mounts)", d, got)
		}
	}
	if got := n.in(t, "findmnt -n -o FSTYPE --mountpoint "+run); got != "tmpfs" {
		t.Errorf("%s in the node is %q, want tmpfs", run, got)
	}
	n.in(t, "mkdir "+dst+"/vol && mount -t tmpfs vol "+dst+"/vol && touch "+dst+"/vol/x "+run+"/y")
	for _, p := range []string{filepath.Join(src, "vol", "x"), filepath.Join(dst, "vol"), filepath.Join(run, "y")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is on this machine: what the node wrote in its own directories reached it", p)
		}
	}
	if out, err := exec.Command("findmnt", "-rn", "-o", "TARGET").Output(); err != nil {
		t.Fatal(err)
	} else {
		var ours []string
		for _, m := range strings.Fields(string(out)) {
			if strings.HasPrefix(m, dir) {
				ours = append(ours, m)
			}
		}
		if len(ours) != 1 || ours[0] != dst {
			t.Errorf("this machine's mounts under %s are %q, want only its own bind of %s: the node's reached it", dir, ours, dst)
		}
	}
	if err := syscall.Kill(n.initPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := n.exit(t, 10*time.Second); code != 0 {
		t.Errorf("nodeinit exited %d; its log:\n%s", code, n.log)
	}
}

// TestRefusesAFilesystemItCannotMake: a directory it cannot bind fails the node's start,
// naming it (exit 1), and -bind without -private is refused (exit 2): it would mount on this
// machine's peers.
func TestRefusesAFilesystemItCannotMake(t *testing.T) {
	needs.Root(t)
	bin := build(t)
	dir := t.TempDir()
	missing, dst := filepath.Join(dir, "missing"), filepath.Join(dir, "dst")
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{args: []string{"-private", "-bind", missing + ":" + dst}, wantCode: 1, want: missing},
		{args: []string{"-bind", dir + ":" + dst}, wantCode: 2, want: "usage"},
		{args: []string{"-private", "-bind", "relative:" + dst}, wantCode: 2, want: "absolute"},
	} {
		args := append([]string{"--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--propagation", "unchanged", "--", bin}, tc.args...)
		out, err := exec.Command("unshare", args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.wantCode || !strings.Contains(string(out), tc.want) {
			t.Errorf("nodeinit %v: %v, %s; want exit %d naming %q", tc.args, err, out, tc.wantCode, tc.want)
		}
	}
}

// TestRefusesToRunAsAnOrdinaryProcess: outside a PID namespace of its own it would reap and
// signal nothing of a node; it says so and exits 2.
func TestRefusesToRunAsAnOrdinaryProcess(t *testing.T) {
	bin := build(t)
	out, err := exec.Command(bin).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "must be PID 1") {
		t.Fatalf("nodeinit as an ordinary process: %v, %s", err, out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}
