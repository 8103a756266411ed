package fusemount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// ProbeTimeout is how long Dead waits for a mount to answer a statfs. A FUSE server that is
// alive answers at once; one that was never started, or whose descriptor is gone, makes the
// kernel answer ENOTCONN at once. A statfs still pending then is a live but slow server.
const ProbeTimeout = 2 * time.Second

// canProbe: this process called RunProbeIfAsked, so this binary, run again as a probe, is
// one. Dead refuses otherwise: a binary that does not know the probe's arguments (a test
// binary with a node service in it) would run as itself.
var canProbe atomic.Bool

// probeStartTimeout bounds a probe process's start, up to its statfs.
const probeStartTimeout = 10 * time.Second

// probeArg, as the first argument, makes a binary that calls RunProbeIfAsked a probe.
const probeArg = "__gcsfuse-csi-stat-probe"

// Exit codes of a probe process.
const (
	probeAlive    = 0
	probeDead     = 3
	probeOtherErr = 4
)

// RunProbeIfAsked makes this process a statfs probe when Dead started it, and exits; in any
// other process it returns at once. Binaries that call Dead (the node plugin, and test
// binaries of packages that reach it) call it first thing in main or TestMain.
func RunProbeIfAsked() {
	if len(os.Args) != 3 || os.Args[1] != probeArg {
		canProbe.Store(true)
		return
	}
	// statfs, not stat: the kernel answers a stat of the mount point from its attribute
	// cache while that is valid (gcsfuse's TTL), even after the connection died, whereas
	// FUSE_STATFS always goes to the server (an aborted connection: ENOTCONN at once).
	_, _ = os.Stdout.Write([]byte{1}) // Dead's timeout starts here
	var st syscall.Statfs_t
	err := syscall.Statfs(os.Args[2], &st)
	switch {
	case err == nil:
		os.Exit(probeAlive)
	case errors.Is(err, syscall.ENOTCONN):
		os.Exit(probeDead)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(probeOtherErr)
}

// Dead reports whether the FUSE mount at target lost its server: a statfs of it fails at
// once with ENOTCONN (a stat can still be answered from the kernel's attribute cache). The
// statfs runs in a child process (this binary again, see RunProbeIfAsked):
// a stat of a mount whose server does not answer blocks in the kernel, and only a process
// can be killed out of that wait, so nothing is left behind when the server never answers.
// A mount that does not answer within timeout is taken as alive; so is any error other than
// ENOTCONN.
func Dead(ctx context.Context, target string, timeout time.Duration) (bool, error) {
	if !canProbe.Load() {
		return false, fmt.Errorf("probe %s: this binary does not answer as a probe (it never called fusemount.RunProbeIfAsked)", target)
	}
	self, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", target, err)
	}
	// The child writes a byte on this pipe just before its statfs: timeout counts from
	// there, not from the process's start, which a node short of memory (where sidecars get
	// OOM-killed) can make slow enough to pass for a mount that does not answer.
	r, w, err := os.Pipe()
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", target, err)
	}
	defer r.Close()
	cmd := exec.Command(self, probeArg, target)
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		w.Close()
		return false, fmt.Errorf("probe %s: %w", target, err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owned by Dead: every return below reaps it first
	// ready says whether the child's byte came (true) or its end without one (false).
	ready := make(chan bool, 1)
	go func() { // owned by Dead: ends at the child's byte or its exit (r's writer closes)
		var b [1]byte
		n, _ := r.Read(b[:])
		ready <- n == 1
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	start := time.NewTimer(probeStartTimeout)
	defer start.Stop()
	exitedEarly := false
	select {
	case ok := <-ready:
		if !ok {
			err = <-exited
			return false, fmt.Errorf("probe %s: ended before its statfs: %v", target, err)
		}
	case err = <-exited:
		// A dead mount's statfs fails at once: the child can be reaped before its byte is
		// read. The pipe holds it, or EOF: the reader answers now either way.
		if !<-ready {
			return false, fmt.Errorf("probe %s: ended before its statfs: %v", target, err)
		}
		exitedEarly = true
	case <-start.C:
		kill()
		return false, fmt.Errorf("probe %s: not started within %s", target, probeStartTimeout)
	case <-ctx.Done():
		kill()
		return false, ctx.Err()
	}
	if !exitedEarly {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case err = <-exited:
		case <-t.C:
			kill()
			return false, nil // pending: alive but slow
		case <-ctx.Done():
			kill()
			return false, ctx.Err()
		}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && exit.ExitCode() == probeDead:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == probeOtherErr:
		return false, nil
	}
	return false, fmt.Errorf("probe %s: %w", target, err)
}
