package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

const (
	// inotifyLimit is the max_inotify_instances of the user namespace the sidecars run in:
	// how many of them can have an inotify instance at once.
	inotifyLimit = 2
	// inotifySidecars is how many sidecars run in that namespace at once: three times the
	// limit, so that most of them are refused an instance and must poll.
	inotifySidecars = 3 * inotifyLimit
	// envUserNSHolder makes the test binary, re-executed by startUserNS, the holder of the
	// user namespace; its value is the limit to set there.
	envUserNSHolder = "GCSFUSE_CSI_TEST_USERNS_HOLDER"
	// holderReady is the line the holder prints once the limit is set and enforced.
	holderReady = "ready"
	// holderStartBound bounds the holder's start: a write to /proc and a few syscalls.
	holderStartBound = 10 * time.Second
	// holderStopBound bounds its end once its stdin is closed.
	holderStopBound = 5 * time.Second
	// servingBound bounds a sidecar's start, from its process start to a stat through its
	// mount (mountedWith allows the same).
	servingBound = 20 * time.Second
	// exitWaitBound bounds the wait for a sidecar's exit after its exit file.
	exitWaitBound = 10 * time.Second
	// exitPromptBound is how soon a sidecar must end after its exit file, as in
	// TestTriggerEndsSidecarPromptly: polling adds at most dirwatch.PollInterval to it.
	exitPromptBound = 2 * time.Second
	// gcsfuseGoneBound bounds the end of a sidecar's gcsfuse after the sidecar's own, as in
	// TestTriggerEndsSidecarPromptly.
	gcsfuseGoneBound = 2 * time.Second
	// pollingLog is part of the warning the sidecar logs when the kernel refuses it an
	// inotify instance and it polls instead (sidecar.Run).
	pollingLog = "the kernel refused an inotify instance"
)

// Every sidecar of a node runs as uid 65534, so all of them share that user's
// fs.inotify.max_user_instances (128 on most distributions, fewer than the pods a node can
// run). A sidecar refused an instance must poll its directories instead and still serve and
// still end on its exit file. The machine's limit is not touched: the sidecars run in a user
// namespace of their own whose max_inotify_instances (the kernel counts inotify instances
// per user and per user namespace, checked up the hierarchy, since Linux 4.9) is
// inotifyLimit, and more of them run at once than it allows.
func TestSidecarsBeyondInotifyLimitServe(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		if needs.Required() {
			t.Fatalf("this test needs nsenter (util-linux) to run sidecars in a user namespace, and %s=1 says it must run here: %v", needs.EnvRequire, err)
		}
		t.Skipf("needs nsenter (util-linux): %v", err)
	}
	userNS := startUserNS(t, inotifyLimit)
	bucket := "bkt-inotify"
	e := newEnv(t, bucket)

	pods := make([]*testenv.Pod, inotifySidecars)
	sidecars := make([]*testenv.Sidecar, inotifySidecars)
	t0 := time.Now()
	// One at a time: the first ones take the namespace's instances and keep them, as
	// long-running sidecars do on a node, so every later one is refused.
	for i := range inotifySidecars {
		pod, err := e.NewPod()
		if err != nil {
			t.Fatal(err)
		}
		if err := pod.Publish(ctx(t), "data", bucket, "", false); err != nil {
			t.Fatalf("NodePublishVolume: %v", err)
		}
		sc, err := pod.StartSidecarWith(testenv.SidecarOptions{Mode: contract.ModeLegacy, GraceSeconds: 30, Echo: echo(t), UserNS: userNS})
		if err != nil {
			t.Fatal(err)
		}
		pods[i], sidecars[i] = pod, sc
		serving(t, i+1, sc, pod.Target("data"))
		requireInNamespace(t, sc.Cmd.Process.Pid, userNS)
	}
	t.Logf("%d sidecars serving %s after the first one's start (%d inotify instances allowed)", inotifySidecars, time.Since(t0), inotifyLimit)

	for i, pod := range pods {
		name := fmt.Sprintf("sidecar-%d.bin", i+1)
		data := randomBytes(t, 64<<10)
		if err := os.WriteFile(filepath.Join(pod.Target("data"), name), data, 0o644); err != nil {
			t.Fatalf("write through sidecar %d's mount: %v\nsidecar output:\n%s", i+1, err, sidecars[i].Output())
		}
		requireObject(t, bucket, name, data)
	}

	took := make([]time.Duration, inotifySidecars)
	for i, pod := range pods {
		sc := sidecars[i]
		fired := time.Now()
		if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "test", Message: "workload done"}); err != nil {
			t.Fatal(err)
		}
		code, err := sc.Wait(exitWaitBound)
		if err != nil || code != 0 {
			t.Fatalf("sidecar %d: exit = %d, %v after its exit file\nsidecar output:\n%s", i+1, code, err, sc.Output())
		}
		took[i] = sc.Exited.Sub(fired)
		waitNoGcsfuse(t, pod, gcsfuseGoneBound)
	}

	// Counted once every sidecar has exited: its output is then complete.
	var polled, watched []string
	for i, sc := range sidecars {
		line := fmt.Sprintf("sidecar %d: exit file -> exit %s", i+1, took[i].Round(time.Millisecond))
		if strings.Contains(sc.Output(), pollingLog) {
			polled = append(polled, line)
		} else {
			watched = append(watched, line)
		}
		if took[i] > exitPromptBound {
			t.Errorf("sidecar %d took %s to exit after its exit file (bound %s; polling adds at most %s)", i+1, took[i], exitPromptBound, dirwatch.PollInterval)
		}
	}
	t.Logf("inotify (%d): %s", len(watched), strings.Join(watched, "; "))
	t.Logf("polling (%d): %s", len(polled), strings.Join(polled, "; "))
	if want := inotifySidecars - inotifyLimit; len(polled) < want {
		t.Fatalf("%d of %d sidecars logged %q, want at least %d: with %d inotify instances allowed in their user namespace the others must have fallen back to polling, so the fallback was not exercised",
			len(polled), inotifySidecars, pollingLog, want, inotifyLimit)
	}
}

// serving waits until the mount at target serves, at most servingBound, and fails t if it
// does not or if sidecar n (counted from 1) exits first (the fallback's absence: a sidecar refused an
// inotify instance ends at once).
func serving(t *testing.T, n int, sc *testenv.Sidecar, target string) {
	t.Helper()
	ready := make(chan error, 1)
	go func() { // a stat through a mount nobody serves blocks until Close unmounts it
		_, err := testenv.WaitReady(target, servingBound)
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("sidecar %d of %d (%d inotify instances allowed) does not serve its mount: %v\nsidecar output:\n%s", n, inotifySidecars, inotifyLimit, err, sc.Output())
		}
	case <-sc.Done():
		code, err := sc.Wait(exitWaitBound) // it has exited: returns at once
		t.Fatalf("sidecar %d of %d (%d inotify instances allowed) exited (code %d, %v) before its mount served\nsidecar output:\n%s", n, inotifySidecars, inotifyLimit, code, err, sc.Output())
	}
}

// requireInNamespace fails t unless process pid runs in user namespace userNS as uid 65534:
// a sidecar outside it would not be bound by its limit.
func requireInNamespace(t *testing.T, pid int, userNS string) {
	t.Helper()
	want, err := os.Readlink(userNS)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "user"))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("sidecar pid %d runs in user namespace %s, not %s", pid, got, want)
	}
	if uid := procUID(t, pid); uid != strconv.Itoa(contract.SidecarUID) {
		t.Fatalf("sidecar pid %d runs as uid %s, not %d", pid, uid, contract.SidecarUID)
	}
}

// startUserNS starts a holder process in a new user namespace whose max_inotify_instances
// is maxInotify, and returns the namespace's path for testenv.SidecarOptions.UserNS. Every
// sidecar joins this one namespace: one of its own each would give each its own limit. The
// holder is this test binary, re-executed; it ends when the test does. The namespace maps
// every uid and gid to itself, as the initial one does, so that the sidecar is uid 65534 to
// the node plugin's peer-credential checks and on the files it makes, as outside it.
func startUserNS(t *testing.T, maxInotify int) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envUserNSHolder+"="+strconv.Itoa(maxInotify))
	identity := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: identity, GidMappings: identity,
		GidMappingsEnableSetgroups: true, // the sidecars' nsenter drops supplementary groups
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A pipe of its own rather than StdoutPipe, which Wait closes: the holder's line stays
	// readable after it has exited.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdout.Close() })
	cmd.Stdout = stdoutW
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	err = cmd.Start()
	stdoutW.Close()
	if err != nil {
		t.Fatalf("start a process in a new user namespace: %v", err)
	}
	done := make(chan struct{})
	go func() { // reaps the holder
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(holderStopBound):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() { // ends at the holder's exit at the latest, which closes the pipe's last writer
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case l := <-line:
		if l != holderReady {
			select { // its stderr is complete once it has exited
			case <-done:
			case <-time.After(holderStopBound):
			}
			t.Fatalf("user namespace holder: %q\n%s", l, stderr.String())
		}
	case <-time.After(holderStartBound):
		t.Fatalf("user namespace holder not ready after %s\n%s", holderStartBound, stderr.String())
	}
	return filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "ns", "user")
}

// userNSHolder is the body of the re-executed test binary in its new user namespace, where
// it is root: it sets the namespace's max_inotify_instances to limit, checks that the
// kernel enforces it, prints holderReady and then keeps the namespace until its stdin
// ends. It returns the exit code.
func userNSHolder(limit string) int {
	n, err := strconv.Atoi(limit)
	if err == nil {
		err = os.WriteFile("/proc/sys/user/max_inotify_instances", []byte(limit), 0)
	}
	if err == nil {
		err = probeInotifyLimit(n)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(holderReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// probeInotifyLimit checks that this process's user can make n inotify instances and not
// one more (EMFILE, what dirwatch falls back on), and closes them again: without it, a
// kernel that did not enforce the namespace's limit would leave the sidecars an instance
// each and the test nothing to prove. The count is per user, so the holder's root does not
// spend the sidecars' uid 65534 instances.
func probeInotifyLimit(n int) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := range n + 1 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		switch {
		case i < n && err != nil:
			return fmt.Errorf("inotify instance %d of the %d allowed: %w", i+1, n, err)
		case i == n && err == nil:
			fds = append(fds, fd)
			return fmt.Errorf("inotify instance %d made with max_inotify_instances %d: the namespace's limit is not enforced", n+1, n)
		case i == n && !errors.Is(err, unix.EMFILE):
			return fmt.Errorf("inotify instance %d beyond max_inotify_instances %d: %w, want EMFILE", n+1, n, err)
		}
		if err == nil {
			fds = append(fds, fd)
		}
	}
	return nil
}
